/* .ci/mfma_check.c: the MFMA index math of kernels.hip ("GEMM, CDNA3 path"
 * and "fp8 GEMM, CDNA3 path"), on the CPU, for tests.sh (no AMD GPU here).
 * mfidx.h is the blocks between kernels.hip's kgate-index marks.  First
 * each index function against AMD's calculator tables (argv[1]:
 * .ci/mfma_gfx942_32x32x8.txt, argv[2]: .ci/mfma_gfx942_32x32x16_fp8.txt);
 * then tiles computed through the kernels' load, LDS, fragment and store
 * index functions, each MFMA's own semantics taken from its tables alone,
 * against the direct product; and the grouped kernels' blocks over ragged
 * rows.  Prints one line per finding; exit 0 when all hold. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#define KG_IX static inline
#include "mfidx.h"

/* [A, B, D][lane][element]: (row, col) as the calculator gives; 16-bit
 * (32x32x8: 4 elements of A and B a lane) and fp8 (32x32x16: 8). */
static int tab[3][64][16][2], tab8[3][64][16][2];

/* The three tables of path into t; ab: A's and B's elements a lane. */
static int read_tables(const char *path, int t[3][64][16][2], int ab)
{
    FILE *f = fopen(path, "r");
    if (!f) { printf("cannot read %s\n", path); return 0; }
    char line[4096];
    int which = -1, n = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        if (strncmp(line, "lane,", 5) == 0) { which++; continue; }
        char *p = line;
        int lane = (int)strtol(p, &p, 10), e = 0;
        while (*p == ',' && which >= 0 && which < 3 && lane >= 0 && lane < 64 && e < 16) {
            char m;
            int r, c;
            if (sscanf(p, ",%c[%d][%d]", &m, &r, &c) != 3) break;
            t[which][lane][e][0] = r, t[which][lane][e][1] = c, e++, n++;
            p = strchr(p + 1, ',') ? strchr(p + 1, ',') : p + strlen(p);
        }
    }
    fclose(f);
    if (n != 64 * ab * 2 + 64 * 16) { printf("%s: %d entries, want %d\n", path, n, 64 * ab * 2 + 64 * 16); return 0; }
    return 1;
}

/* Each index function against the tables: A (row, k), B (k, col), D (row, col). */
static int check_tables(void)
{
    int bad = 0;   /* the first 3 findings printed */
    for (int l = 0; l < 64; l++) {
        for (int i = 0; i < 4; i++) {
            if ((kg_mf_ab_rc(l) != tab[0][l][i][0] || kg_mf_ab_k(l, i) != tab[0][l][i][1]) && bad++ < 3)
                printf("A: lane %d element %d: kernel (%d,%d), calculator (%d,%d)\n", l, i,
                                    kg_mf_ab_rc(l), kg_mf_ab_k(l, i), tab[0][l][i][0], tab[0][l][i][1]);
            if ((kg_mf_ab_k(l, i) != tab[1][l][i][0] || kg_mf_ab_rc(l) != tab[1][l][i][1]) && bad++ < 3)
                printf("B: lane %d element %d: kernel (%d,%d), calculator (%d,%d)\n", l, i,
                                    kg_mf_ab_k(l, i), kg_mf_ab_rc(l), tab[1][l][i][0], tab[1][l][i][1]);
        }
        for (int i = 0; i < 16; i++)
            if ((kg_mf_d_row(l, i) != tab[2][l][i][0] || kg_mf_d_col(l) != tab[2][l][i][1]) && bad++ < 3)
                printf("D: lane %d accumulator %d: kernel (%d,%d), calculator (%d,%d)\n", l, i,
                                    kg_mf_d_row(l, i), kg_mf_d_col(l), tab[2][l][i][0], tab[2][l][i][1]);
    }
    return bad == 0;
}

/* The fp8 index functions against the 32x32x16 tables: A and B through
 * kg_mf8_ab_k, D as 32x32x8's. */
static int check_tables8(void)
{
    int bad = 0;
    for (int l = 0; l < 64; l++) {
        for (int i = 0; i < 8; i++) {
            if ((kg_mf_ab_rc(l) != tab8[0][l][i][0] || kg_mf8_ab_k(l, i) != tab8[0][l][i][1]) && bad++ < 3)
                printf("fp8 A: lane %d element %d: kernel (%d,%d), calculator (%d,%d)\n", l, i,
                       kg_mf_ab_rc(l), kg_mf8_ab_k(l, i), tab8[0][l][i][0], tab8[0][l][i][1]);
            if ((kg_mf8_ab_k(l, i) != tab8[1][l][i][0] || kg_mf_ab_rc(l) != tab8[1][l][i][1]) && bad++ < 3)
                printf("fp8 B: lane %d element %d: kernel (%d,%d), calculator (%d,%d)\n", l, i,
                       kg_mf8_ab_k(l, i), kg_mf_ab_rc(l), tab8[1][l][i][0], tab8[1][l][i][1]);
        }
        for (int i = 0; i < 16; i++)
            if ((kg_mf_d_row(l, i) != tab8[2][l][i][0] || kg_mf_d_col(l) != tab8[2][l][i][1]) && bad++ < 3)
                printf("fp8 D: lane %d accumulator %d: kernel (%d,%d), calculator (%d,%d)\n", l, i,
                       kg_mf_d_row(l, i), kg_mf_d_col(l), tab8[2][l][i][0], tab8[2][l][i][1]);
    }
    return bad == 0;
}

/* One MFMA 32x32x8 as the tables define it: lane l's fragments a[l][i],
 * b[l][i] placed at the tables' (row, k) and (k, col), D = A B + C with C
 * and D in the lanes' accumulators acc[l][i] at the tables' (row, col). */
static void mfma_emulated(const double a[64][4], const double b[64][4], double acc[64][16])
{
    double A[32][8], B[8][32], Dm[32][32];
    for (int l = 0; l < 64; l++)
        for (int i = 0; i < 4; i++) A[tab[0][l][i][0]][tab[0][l][i][1]] = a[l][i], B[tab[1][l][i][0]][tab[1][l][i][1]] = b[l][i];
    for (int l = 0; l < 64; l++)
        for (int i = 0; i < 16; i++) Dm[tab[2][l][i][0]][tab[2][l][i][1]] = acc[l][i];
    for (int r = 0; r < 32; r++)
        for (int c = 0; c < 32; c++)
            for (int k = 0; k < 8; k++) Dm[r][c] += A[r][k] * B[k][c];
    for (int l = 0; l < 64; l++)
        for (int i = 0; i < 16; i++) acc[l][i] = Dm[tab[2][l][i][0]][tab[2][l][i][1]];
}

/* Thread t's loads of one operand's tile (rows r0.., k k0..) into the LDS
 * array s as kg_mf_fetch / kg_mf_put place them (mode v), zeros outside. */
static void load_tile(double *s, const double *P, long sr, long sk, int R, int K, int r0, int k0, int v)
{
    for (int t = 0; t < MF_THREADS; t++)
        for (int j = 0; j < (v ? 2 : 16); j++)
            for (int e = 0; e < (v ? 8 : 1); e++) {
                int rr = kg_mf_load_row(v, t, j), kk = kg_mf_load_k(v, t, j) + e, r = r0 + rr, k = k0 + kk;
                s[kg_mf_lds(rr, kk)] = r < R && k < K ? P[r * sr + k * sk] : 0;
            }
}

/* n small integers in -7..8 from the LCG state *seed, into P. */
static void fill_ints(double *P, int n, unsigned *seed)
{
    for (int i = 0; i < n; i++) P[i] = (double)((*seed = *seed * 1103515245u + 12345u) >> 16 & 15) - 7;
}

/* Block (m0, n0)'s accumulators (wave w, sub-tiles x, y) into C (M x N,
 * row-major) where the kernels' stores place them, counting each
 * element's writes. */
static void tile_store(double acc[4][2][2][64][16], double *C, int *writes, int M, int N, int m0, int n0)
{
    for (int w = 0; w < 4; w++)
        for (int x = 0; x < 2; x++)
            for (int y = 0; y < 2; y++)
                for (int l = 0; l < 64; l++)
                    for (int i = 0; i < 16; i++) {
                        int m = m0 + kg_mf_wave_row(w) + 32 * x + kg_mf_d_row(l, i);
                        int n = n0 + kg_mf_wave_col(w) + 32 * y + kg_mf_d_col(l);
                        if (m < M && n < N) C[m * N + n] = acc[w][x][y][l][i], writes[m * N + n]++;
                    }
}

/* The largest |C - X Y| (X(m, k) at X[m*sxm + k*sxk], Y^T(n, k) at
 * Y[n*syn + k*syk]), or -1 when an element of C was not written exactly
 * once. */
static double tile_worst(const double *C, const int *writes, const double *X, const double *Y, int M, int N,
                         int K, long sxm, long sxk, long syn, long syk)
{
    double worst = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += X[m * sxm + k * sxk] * Y[n * syn + k * syk];
            if (writes[m * N + n] != 1) return -1;
            double d = C[m * N + n] - s;
            if (d < 0) d = -d;
            if (d > worst) worst = d;
        }
    return worst;
}

/* C = X Y (M x N x K, X and Y^T row-major when vx, vy; else column-major)
 * through the kernel's index math, block by block; returns the largest
 * |difference| from the direct product, or -1 when an element of C is not
 * written exactly once. */
static double tile_run(int M, int N, int K, int vx, int vy, unsigned seed)
{
    double *X = malloc(sizeof(double) * M * K + 1), *Y = malloc(sizeof(double) * N * K + 1);
    double *C = calloc((size_t)M * N, sizeof(double));
    int *writes = calloc((size_t)M * N, sizeof(int));
    double xs[MF_BM * MF_LD], ys[MF_BN * MF_LD];
    fill_ints(X, M * K, &seed);
    fill_ints(Y, N * K, &seed);
    long sxm = vx ? K : 1, sxk = vx ? 1 : M, syn = vy ? K : 1, syk = vy ? 1 : N;   /* Y^T's (n, k) */
    static double acc[4][2][2][64][16];
    for (int m0 = 0; m0 < M; m0 += MF_BM)
        for (int n0 = 0; n0 < N; n0 += MF_BN) {
            memset(acc, 0, sizeof acc);
            for (int k0 = 0; k0 < K; k0 += MF_BK) {
                for (int i = 0; i < MF_BM * MF_LD; i++) xs[i] = ys[i] = 1e30;   /* what no load wrote shows */
                load_tile(xs, X, sxm, sxk, M, K, m0, k0, vx);
                load_tile(ys, Y, syn, syk, N, K, n0, k0, vy);
                for (int w = 0; w < 4; w++)
                    for (int kk = 0; kk < MF_BK; kk += 8)
                        for (int x = 0; x < 2; x++)
                            for (int y = 0; y < 2; y++) {
                                double a[64][4], b[64][4];
                                for (int l = 0; l < 64; l++)
                                    for (int i = 0; i < 4; i++) {
                                        a[l][i] = xs[kg_mf_lds(kg_mf_wave_row(w) + 32 * x + kg_mf_ab_rc(l), kk + kg_mf_ab_k(l, i))];
                                        b[l][i] = ys[kg_mf_lds(kg_mf_wave_col(w) + 32 * y + kg_mf_ab_rc(l), kk + kg_mf_ab_k(l, i))];
                                    }
                                mfma_emulated(a, b, acc[w][x][y]);
                            }
            }
            tile_store(acc, C, writes, M, N, m0, n0);
        }
    double worst = tile_worst(C, writes, X, Y, M, N, K, sxm, sxk, syn, syk);
    free(X), free(Y), free(C), free(writes);
    return worst;
}

/* One MFMA 32x32x16 (fp8) as its tables define it, as mfma_emulated. */
static void mfma_emulated8(const double a[64][8], const double b[64][8], double acc[64][16])
{
    double A[32][16], B[16][32], Dm[32][32];
    for (int l = 0; l < 64; l++)
        for (int i = 0; i < 8; i++)
            A[tab8[0][l][i][0]][tab8[0][l][i][1]] = a[l][i], B[tab8[1][l][i][0]][tab8[1][l][i][1]] = b[l][i];
    for (int l = 0; l < 64; l++)
        for (int i = 0; i < 16; i++) Dm[tab8[2][l][i][0]][tab8[2][l][i][1]] = acc[l][i];
    for (int r = 0; r < 32; r++)
        for (int c = 0; c < 32; c++)
            for (int k = 0; k < 16; k++) Dm[r][c] += A[r][k] * B[k][c];
    for (int l = 0; l < 64; l++)
        for (int i = 0; i < 16; i++) acc[l][i] = Dm[tab8[2][l][i][0]][tab8[2][l][i][1]];
}

/* Thread t's fp8 loads of a tile (rows r0.., codes k0..) of rows of K
 * codes into the LDS bytes s, as kg_mf8_fetch / kg_mf8_put place them. */
static void load_tile8(double *s, const double *P, int R, int K, int r0, int k0)
{
    for (int t = 0; t < MF_THREADS; t++)
        for (int j = 0; j < 2; j++)
            for (int e = 0; e < 16; e++) {
                int rr = kg_mf8_load_row(t, j), kk = kg_mf8_load_k(t, j) + e, r = r0 + rr, k = k0 + kk;
                s[kg_mf8_lds(rr, kk)] = r < R && k < K ? P[(long)r * K + k] : 0;
            }
}

/* tile_run for the fp8 kernel: C = X Y, X [M][K] and Y^T [N][K] rows of
 * codes, through its index math; the largest |difference| from the direct
 * product, -1 when an element of C is not written exactly once. */
static double tile_run8(int M, int N, int K, unsigned seed)
{
    double *X = malloc(sizeof(double) * M * K + 1), *Y = malloc(sizeof(double) * N * K + 1);
    double *C = calloc((size_t)M * N, sizeof(double));
    int *writes = calloc((size_t)M * N, sizeof(int));
    static double xs[MF_BM * MF8_LD], ys[MF_BN * MF8_LD], acc[4][2][2][64][16];
    fill_ints(X, M * K, &seed);
    fill_ints(Y, N * K, &seed);
    for (int m0 = 0; m0 < M; m0 += MF_BM)
        for (int n0 = 0; n0 < N; n0 += MF_BN) {
            memset(acc, 0, sizeof acc);
            for (int k0 = 0; k0 < K; k0 += MF8_BK) {
                for (int i = 0; i < MF_BM * MF8_LD; i++) xs[i] = ys[i] = 1e30;   /* what no load wrote shows */
                load_tile8(xs, X, M, K, m0, k0);
                load_tile8(ys, Y, N, K, n0, k0);
                for (int w = 0; w < 4; w++)
                    for (int kk = 0; kk < MF8_BK; kk += 16)
                        for (int x = 0; x < 2; x++)
                            for (int y = 0; y < 2; y++) {
                                double a[64][8], b[64][8];
                                for (int l = 0; l < 64; l++)
                                    for (int i = 0; i < 8; i++) {
                                        a[l][i] = xs[kg_mf8_lds(kg_mf_wave_row(w) + 32 * x + kg_mf_ab_rc(l), kk + kg_mf8_ab_k(l, i))];
                                        b[l][i] = ys[kg_mf8_lds(kg_mf_wave_col(w) + 32 * y + kg_mf_ab_rc(l), kk + kg_mf8_ab_k(l, i))];
                                    }
                                mfma_emulated8(a, b, acc[w][x][y]);
                            }
            }
            tile_store(acc, C, writes, M, N, m0, n0);
        }
    double worst = tile_worst(C, writes, X, Y, M, N, K, K, 1, K, 1);
    free(X), free(Y), free(C), free(writes);
    return worst;
}

/* The attention forward's row reduction: from every lane, the lanes that
 * the xor rounds kg_mfa_xor(0..4) reach hold the same row in each
 * accumulator, and together all 32 columns of it. */
static int attn_reduction_ok(void)
{
    for (int l = 0; l < 64; l++)
        for (int i = 0; i < 16; i++) {
            int cols = 0;
            for (int x = 0; x < 32; x++) {
                int o = l;
                for (int s = 0; s < 5; s++)
                    if (x >> s & 1) o ^= kg_mfa_xor(s);
                if (o < 0 || o > 63 || kg_mf_d_row(o, i) != kg_mf_d_row(l, i)) return 0;
                cols |= 1 << kg_mf_d_col(o);
            }
            if (cols != -1) return 0;
        }
    return 1;
}

/* A butterfly over the 64 lanes' values v as the kernel runs it: each round
 * s, lane l combines its value with lane l ^ kg_mfa_xor(s)'s (max or sum). */
static void attn_butterfly(double v[64], int max)
{
    for (int s = 0; s < 5; s++) {
        double nv[64];
        for (int l = 0; l < 64; l++) {
            double o = v[l ^ kg_mfa_xor(s)];
            nv[l] = max ? (o > v[l] ? o : v[l]) : v[l] + o;
        }
        memcpy(v, nv, sizeof nv);
    }
}

/* One head of the attention forward (Sq queries, Sk keys, head dim Dh,
 * causal bottom-right or not) through kg_attn_fwd_mfma's index math: its
 * loads of K and V^T into LDS, Q's fragments, S on the emulated MFMA, the
 * masks, the online softmax with its butterflies, P through LDS, O += P V
 * and the end; the largest |difference| from softmax(scale Q K^T) V and
 * LSE in double; -1 when an output is not written exactly once or a key
 * tile's loads miss an element. */
static double attn_run(int Sq, int Sk, int Dh, int causal, unsigned seed)
{
    const double scale = 0.125, ninf = -1.0 / 0.0;
    double *Q = malloc(sizeof(double) * Sq * Dh + 8), *Kt = malloc(sizeof(double) * Sk * Dh + 8);
    double *V = malloc(sizeof(double) * Sk * Dh + 8), *O = calloc((size_t)Sq * Dh + 1, sizeof(double));
    double *L = calloc((size_t)Sq + 1, sizeof(double)), worst = 0;
    int *writes = calloc((size_t)Sq * Dh + 1, sizeof(int)), *lwrites = calloc((size_t)Sq + 1, sizeof(int));
    static double ks[MFA_BN * MFA_KLD], vt[MFA_DMAX * MFA_VLD], ps[MFA_BM * MFA_VLD], o[4][64][16];
    static int loaded[MFA_BN][MFA_DMAX];
    double *all[3] = { Q, Kt, V };
    int n[3] = { Sq * Dh, Sk * Dh, Sk * Dh };
    for (int a = 0; a < 3; a++) fill_ints(all[a], n[a], &seed);
    int diag = Sk - Sq;
    for (int i0 = 0; i0 < Sq; i0 += MFA_BM)
        for (int w = 0; w < 4; w++) {
            int rows = Sq - i0 < MFA_BM ? Sq - i0 : MFA_BM, kend = causal ? i0 + rows + diag : Sk;
            double qf[MFA_DMAX / 8][64][4], m[64][16], ls[64][16];
            for (int s = 0; s < MFA_DMAX / 8; s++)
                for (int l = 0; l < 64; l++)
                    for (int i = 0; i < 4; i++) {
                        int r = i0 + 32 * w + kg_mf_ab_rc(l), d = 8 * s + kg_mf_ab_k(l, 0) + i;
                        qf[s][l][i] = r < Sq && d < Dh ? Q[r * Dh + d] : 0;
                    }
            for (int l = 0; l < 64; l++)
                for (int i = 0; i < 16; i++) {
                    m[l][i] = ninf, ls[l][i] = 0;
                    for (int ob = 0; ob < 4; ob++) o[ob][l][i] = 0;
                }
            for (int j0 = 0; j0 < kend; j0 += MFA_BN) {
                memset(loaded, 0, sizeof loaded);
                for (int i = 0; i < MFA_BN * MFA_KLD; i++) ks[i] = 1e30;
                for (int i = 0; i < MFA_DMAX * MFA_VLD; i++) vt[i] = 1e30;
                for (int t = 0; t < MF_THREADS; t++)
                    for (int e = 0; e < MFA_BN * MFA_DMAX / MF_THREADS; e++) {
                        int j = kg_mfa_load_key(t, e), d = kg_mfa_load_d(t, e), in = j0 + j < Sk && d < Dh;
                        loaded[j][d]++;
                        ks[kg_mfa_ks(j, d)] = in ? Kt[(j0 + j) * Dh + d] : 0;
                        vt[kg_mfa_vt(d, j)] = in ? V[(j0 + j) * Dh + d] : 0;
                    }
                for (int j = 0; j < MFA_BN; j++)
                    for (int d = 0; d < MFA_DMAX; d++)
                        if (loaded[j][d] != 1) { worst = -1; goto done; }
                double sc[64][16] = { { 0 } };
                for (int s = 0; s < MFA_DMAX / 8 && 8 * s < Dh; s++) {
                    double b[64][4];
                    for (int l = 0; l < 64; l++)
                        for (int i = 0; i < 4; i++) b[l][i] = ks[kg_mfa_ks(kg_mf_ab_rc(l), 8 * s + kg_mf_ab_k(l, i))];
                    mfma_emulated(qf[s], b, sc);
                }
                for (int i = 0; i < 16; i++) {
                    double sv[64], mx[64], p[64];
                    for (int l = 0; l < 64; l++) {
                        int qi = i0 + 32 * w + kg_mf_d_row(l, i), kj = j0 + kg_mf_d_col(l);
                        int vis = qi < Sq && kj < Sk && (!causal || kj - qi <= diag);
                        sv[l] = mx[l] = vis ? scale * sc[l][i] : ninf;
                    }
                    attn_butterfly(mx, 1);
                    for (int l = 0; l < 64; l++) {
                        double mn = mx[l] > m[l][i] ? mx[l] : m[l][i], alpha = 1;
                        p[l] = 0;
                        if (mn != ninf) alpha = exp(m[l][i] - mn), p[l] = exp(sv[l] - mn);
                        m[l][i] = mn, ls[l][i] *= alpha;
                        for (int ob = 0; ob < 4; ob++) o[ob][l][i] *= alpha;
                        ps[kg_mfa_ps(32 * w + kg_mf_d_row(l, i), kg_mf_d_col(l))] = p[l];
                    }
                    attn_butterfly(p, 0);
                    for (int l = 0; l < 64; l++) ls[l][i] += p[l];
                }
                for (int ob = 0; ob < 4 && 32 * ob < Dh; ob++)
                    for (int kk = 0; kk < MFA_BN; kk += 8) {
                        double a[64][4], b[64][4];
                        for (int l = 0; l < 64; l++)
                            for (int i = 0; i < 4; i++) {
                                a[l][i] = ps[kg_mfa_ps(32 * w + kg_mf_ab_rc(l), kk + kg_mf_ab_k(l, i))];
                                b[l][i] = vt[kg_mfa_vt(32 * ob + kg_mf_ab_rc(l), kk + kg_mf_ab_k(l, i))];
                            }
                        mfma_emulated(a, b, o[ob]);
                    }
            }
            for (int l = 0; l < 64; l++)
                for (int i = 0; i < 16; i++) {
                    int qi = i0 + 32 * w + kg_mf_d_row(l, i);
                    if (qi >= Sq) continue;
                    for (int ob = 0; ob < 4; ob++) {
                        int d = 32 * ob + kg_mf_d_col(l);
                        if (d < Dh) O[qi * Dh + d] = m[l][i] == ninf ? 0 : o[ob][l][i] / ls[l][i], writes[qi * Dh + d]++;
                    }
                    if (kg_mf_d_col(l) == 0) L[qi] = m[l][i] == ninf ? ninf : m[l][i] + log(ls[l][i]), lwrites[qi]++;
                }
        }
    for (int qi = 0; qi < Sq; qi++) {   /* the direct softmax in double */
        double mx = ninf, sum = 0;
        for (int j = 0; j < Sk; j++)
            if (!causal || j - qi <= diag) {
                double s = 0;
                for (int d = 0; d < Dh; d++) s += Q[qi * Dh + d] * Kt[j * Dh + d];
                mx = scale * s > mx ? scale * s : mx;
            }
        if (lwrites[qi] != 1) { worst = -1; goto done; }
        for (int d = 0; d < Dh; d++) {
            double acc = 0;
            sum = 0;
            for (int j = 0; j < Sk; j++)
                if (!causal || j - qi <= diag) {
                    double s = 0;
                    for (int e = 0; e < Dh; e++) s += Q[qi * Dh + e] * Kt[j * Dh + e];
                    double p = exp(scale * s - mx);
                    sum += p, acc += p * V[j * Dh + d];
                }
            double want = mx == ninf ? 0 : acc / sum, diff = fabs(O[qi * Dh + d] - want);
            if (writes[qi * Dh + d] != 1) { worst = -1; goto done; }
            if (diff > worst) worst = diff;
        }
        double lse = mx == ninf ? ninf : mx + log(sum);
        if (!(L[qi] == lse || fabs(L[qi] - lse) <= worst + 1e-9)) worst = fabs(L[qi] - lse);
    }
done:
    free(Q), free(Kt), free(V), free(O), free(L), free(writes), free(lwrites);
    return worst;
}

/* Grouped by ragged rows: with tile_offs in tiles of 64 rows (as the host
 * computes it), the blocks that kg_mf_group_row keeps cover each group's
 * rows exactly once, 128 at most each, none past its group's end. */
static int group_rows_ok(const int *sizes, int G)
{
    int offs[64] = { 0 }, tile_offs[64] = { 0 }, *seen;
    for (int g = 0; g < G; g++)
        offs[g + 1] = offs[g] + sizes[g], tile_offs[g + 1] = tile_offs[g] + (sizes[g] + 63) / 64;
    seen = calloc((size_t)offs[G] + 1, sizeof *seen);
    for (int y = 0; y < tile_offs[G]; y++) {
        int g = 0;
        while (g + 1 < G && tile_offs[g + 1] <= y) g++;
        int r = kg_mf_group_row(y - tile_offs[g]);
        if (r < 0) continue;
        for (int m = offs[g] + r; m < offs[g] + r + MF_BM && m < offs[g + 1]; m++) seen[m]++;
    }
    int good = 1;
    for (int m = 0; m < offs[G]; m++) good &= seen[m] == 1;
    free(seen);
    return good;
}

int main(int argc, char **argv)
{
    if (argc < 3 || !read_tables(argv[1], tab, 4) || !read_tables(argv[2], tab8, 8)) return 2;
    int ok = check_tables();
    printf("%s: the lane layouts of A, B and D against the calculator's tables\n", ok ? "agree" : "DIFFER");
    int ok8 = check_tables8();
    ok &= ok8;
    printf("%s: fp8: the lane layouts of A, B and D against the calculator's tables\n", ok8 ? "agree" : "DIFFER");
    static const int shapes[][3] = { { 128, 128, 32 }, { 200, 130, 77 }, { 1, 257, 9 }, { 300, 1, 100 }, { 129, 128, 0 } };
    for (int s = 0; s < 5; s++)
        for (int v = 0; v < 4; v++) {
            double d = tile_run(shapes[s][0], shapes[s][1], shapes[s][2], v & 1, v >> 1, 42u + (unsigned)s);
            int good = d == 0;
            ok &= good;
            printf("%s: %dx%dx%d, X %s, Y^T %s: %s %g\n", good ? "exact" : "WRONG", shapes[s][0],
                   shapes[s][1], shapes[s][2], v & 1 ? "K-contiguous" : "M-contiguous", v >> 1 ? "K-contiguous" : "N-contiguous",
                   d < 0 ? "an element not written exactly once" : "largest difference", d);
        }
    static const int shapes8[][3] = { { 128, 128, 64 }, { 200, 130, 77 }, { 1, 257, 9 }, { 300, 1, 200 }, { 129, 128, 0 } };
    for (int s = 0; s < 5; s++) {
        double d = tile_run8(shapes8[s][0], shapes8[s][1], shapes8[s][2], 7u + (unsigned)s);
        int good = d == 0;
        ok &= good;
        printf("%s: fp8 %dx%dx%d: %s %g\n", good ? "exact" : "WRONG", shapes8[s][0], shapes8[s][1], shapes8[s][2],
               d < 0 ? "an element not written exactly once" : "largest difference", d);
    }
    int red = attn_reduction_ok();
    ok &= red;
    printf("%s: attention: each row's xor rounds stay in its half-wave and reach its 32 columns\n", red ? "exact" : "WRONG");
    static const int attn[][4] = { { 128, 32, 128, 0 }, { 200, 77, 80, 1 }, { 70, 300, 111, 1 }, { 1, 1, 64, 0 },
                                   { 40, 5, 8, 1 }, { 33, 0, 16, 0 } };
    for (int s = 0; s < 6; s++) {
        double d = attn_run(attn[s][0], attn[s][1], attn[s][2], attn[s][3], 11u + (unsigned)s);
        int good = d >= 0 && d < 1e-9;
        ok &= good;
        printf("%s: attention Sq %d Sk %d d %d%s: %s %g\n", good ? "agree" : "WRONG", attn[s][0], attn[s][1],
               attn[s][2], attn[s][3] ? " causal" : "", d < 0 ? "an output not written once, or a load missed" : "largest difference", d);
    }
    static const int groups[][8] = { { 0, 4096, 1, 2047, 0, 3000, 129, 65 }, { 64, 0, 200, 7, 128, 129, 1, 0 } };
    for (int i = 0; i < 2; i++) {
        int good = group_rows_ok(groups[i], 8);
        ok &= good;
        printf("%s: grouped rows %d,%d,%d,%d,%d,%d,%d,%d: %s\n", good ? "exact" : "WRONG", groups[i][0], groups[i][1],
               groups[i][2], groups[i][3], groups[i][4], groups[i][5], groups[i][6], groups[i][7],
               good ? "each row in one block" : "a row in no block or in two");
    }
    return ok ? 0 : 1;
}
