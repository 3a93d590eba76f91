/* .ci/fb_rank_check.c: the fused attention backward's rotated walk
 * (kernels.hip, "Attention backward, Hopper path"), on the CPU, for
 * tests.sh.  fbrank.h is the block between kernels.hip's kgate-fbrank
 * marks: kg_fb_pos (where a rotated walk is at a step) and kg_fb_rank (the
 * order of the dQ adds at a slab).  For every walk of nq query blocks,
 * span R (1 <= R <= nq; R = 1 is the plain walk) and nkb key blocks (key
 * block j rotated by j mod R, as kg_fb_dkdv does), it checks
 *   - that each key block's walk meets each position once;
 *   - that the ranks at each position are a permutation of 0 .. nkb-1 and
 *     equal the order of (the step at which a block meets it, key block),
 *     counted here by brute force;
 *   - that the locks' protocol (kg_fb_dq_sum: a block adds at a slab when
 *     its lock equals the block's rank, then raises it) finishes when all
 *     nkb blocks are resident, as kgate's nres bound ensures;
 * and counts the walks that would wait for ever with fewer resident blocks
 * than key blocks (dispatched in order, a finished block's place taken by
 * the next): the reason for the bound.  Prints one line per finding; exit
 * 0 when all hold. */
#include <stdio.h>
#include <stdlib.h>
#define KG_FB_IX static inline
#include "fbrank.h"

#define NQ_MAX 20
#define NKB_MAX 40

/* The step at which key block j (walk rotated by j mod R) meets position
 * p, found by walking; -1 (and a finding) when it meets p other than once. */
static int meet(int j, int p, int nq, int R, int *bad)
{
    int at = -1, n = 0;
    for (int u = 0; u < nq; u++)
        if (kg_fb_pos(u, j % R, nq) == p) at = u, n++;
    if (n != 1 && (*bad)++ < 5) printf("WRONG: walk nq %d R %d: key block %d meets position %d %d times\n", nq, R, j, p, n);
    return at;
}

/* Whether the locks' protocol finishes: nres blocks resident at a time,
 * taken in order (block j + nres waits for a place); each resident block
 * adds at its step's slab once the slab's lock equals its rank there.
 * Returns 1 when every block finishes, 0 when no resident block can move. */
static int locks_finish(int nq, int R, int nkb, int nres)
{
    int lock[NQ_MAX] = { 0 }, step[NKB_MAX] = { 0 }, next = nres < nkb ? nres : nkb, done = 0;
    int res[NKB_MAX], nr = next;
    for (int i = 0; i < nr; i++) res[i] = i;
    while (done < nkb) {
        int moved = 0;
        for (int i = 0; i < nr; i++) {
            int j = res[i], p = kg_fb_pos(step[j], j % R, nq);
            if (lock[p] != kg_fb_rank(j, p, nkb, nq, R)) continue;
            lock[p]++, moved = 1;
            if (++step[j] == nq) {
                done++;
                if (next < nkb) res[i] = next++;
                else res[i--] = res[--nr];
            }
        }
        if (!moved) return 0;
    }
    return 1;
}

int main(void)
{
    int bad = 0, walks = 0, stuck = 0, short_walks = 0;
    for (int nq = 1; nq <= NQ_MAX; nq++)
        for (int R = 1; R <= nq; R++)
            for (int nkb = 1; nkb <= NKB_MAX; nkb++) {
                walks++;
                for (int p = 0; p < nq; p++) {
                    int seen[NKB_MAX] = { 0 }, at[NKB_MAX];
                    for (int j = 0; j < nkb; j++) at[j] = meet(j, p, nq, R, &bad);
                    for (int j = 0; j < nkb; j++) {
                        int want = 0;
                        for (int k = 0; k < nkb; k++) want += at[k] < at[j] || (at[k] == at[j] && k < j);
                        int got = kg_fb_rank(j, p, nkb, nq, R);
                        if (got != want && bad++ < 5)
                            printf("WRONG: rank nq %d R %d nkb %d: key block %d at position %d: %d, the (step, block) order says %d\n",
                                   nq, R, nkb, j, p, got, want);
                        if (got >= 0 && got < nkb) seen[got]++;
                    }
                    for (int k = 0; k < nkb; k++)
                        if (seen[k] != 1 && bad++ < 5)
                            printf("WRONG: rank nq %d R %d nkb %d: position %d has rank %d %d times\n", nq, R, nkb, p, k, seen[k]);
                }
                if (!locks_finish(nq, R, nkb, nkb) && bad++ < 5)
                    printf("WRONG: locks nq %d R %d nkb %d: the adds wait for ever with all blocks resident\n", nq, R, nkb);
                if (nkb > 1) short_walks++, stuck += !locks_finish(nq, R, nkb, nkb - 1);
            }
    if (bad == 0)
        printf("exact: %d walks (nq <= %d, span R <= nq, nkb <= %d): each walk meets each position once, the ranks are the "
               "(step, key block) order, and the locks finish with all blocks resident\n", walks, NQ_MAX, NKB_MAX);
    printf("one block short of resident: %d of %d walks wait for ever\n", stuck, short_walks);
    return bad != 0;
}
