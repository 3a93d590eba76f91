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

/* C = X Y (M x N x K, X and Y^T row-major when vx, vy; else column-major)
 * through the kernel's index math, block by block; returns the largest
 * |difference| from the direct product, or -1 when an element of C is not
 * written exactly once. */
static double tile_run(int M, int N, int K, int vx, int vy, unsigned seed)
{
    double *X = malloc(sizeof(double) * M * K + 1), *Y = malloc(sizeof(double) * N * K + 1);
    double *C = calloc((size_t)M * N, sizeof(double));
    int *writes = calloc((size_t)M * N, sizeof(int));
    double xs[MF_BM * MF_LD], ys[MF_BN * MF_LD], worst = 0;
    for (int i = 0; i < M * K; i++) X[i] = (double)((seed = seed * 1103515245u + 12345u) >> 16 & 15) - 7;
    for (int i = 0; i < N * K; i++) Y[i] = (double)((seed = seed * 1103515245u + 12345u) >> 16 & 15) - 7;
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
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += X[m * sxm + k * sxk] * Y[n * syn + k * syk];
            if (writes[m * N + n] != 1) { worst = -1; goto done; }
            double d = C[m * N + n] - s;
            if (d < 0) d = -d;
            if (d > worst) worst = d;
        }
done:
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
    double worst = 0;
    for (int i = 0; i < M * K; i++) X[i] = (double)((seed = seed * 1103515245u + 12345u) >> 16 & 15) - 7;
    for (int i = 0; i < N * K; i++) Y[i] = (double)((seed = seed * 1103515245u + 12345u) >> 16 & 15) - 7;
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
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += X[m * K + k] * Y[n * K + k];
            if (writes[m * N + n] != 1) { worst = -1; goto done; }
            double d = C[m * N + n] - s;
            if (d < 0) d = -d;
            if (d > worst) worst = d;
        }
done:
    free(X), free(Y), free(C), free(writes);
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
