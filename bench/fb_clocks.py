#!/usr/bin/env python3
"""Where the fused attention backward's SM-time goes, block by block.

Reads the stdout of kgate run on a diagnostic build of kernels.hip with
`#define FB_CLK 1` at its top (through --kernels; its times are not the
kernel's).  Each launch of the fused pass prints, once its grid is complete,
one line per block that ran and then an end line:

    fbclk INDEX SM T0 T1 T2 T3 T4 T5
    fbclk end COUNT

T0..T5 are the block's wall clocks in ns (%globaltimer): its start, K and V
landed, consumer 0's walk done, consumer 0's and consumer 1's stores issued,
the dQ warp's last add landed.  A block's end is the latest of T3..T5.  A
launch whose lines are fewer than COUNT (device printf's buffer dropped some)
is left out.

Per launch (the one of median span, and the last) it prints the span, the
share of the SMs' time that blocks fill, each phase's median per block, and
the SM-time split into the phases, the gaps between an SM's blocks, and the
idle SMs at the grid's start and end; the shares sum to 1.

    python3 bench/fb_clocks.py KGATE_STDOUT
    python3 bench/fb_clocks.py --self-test
"""
import statistics
import sys

PHASES = ("prologue", "walk", "epilogue", "dQ drain")


def read_launches(lines):
    """The complete launches in lines: lists of (index, sm, t0..t5), each
    launch as many lines as its end line counts."""
    launches, cur = [], []
    for line in lines:
        f = line.split()
        if not f or f[0] != "fbclk":
            continue
        if f[1] == "end":
            if cur and len(f) == 3 and len(cur) == int(f[2]):
                launches.append(cur)
            cur = []
        elif len(f) == 9:
            cur.append(tuple(int(x) for x in f[1:]))
    return launches


def block_phases(b):
    """A block's (sm, start, end, prologue, walk, epilogue, drain) in ns."""
    _, sm, t0, t1, t2, t3, t4, t5 = b
    cons = max(t3, t4)
    end = max(cons, t5)
    return sm, t0, end, t1 - t0, t2 - t1, cons - t2, end - cons


def summarize(launch):
    """The figures of one launch, a dict (times in ns, shares of SM-time)."""
    bl = [block_phases(b) for b in launch]
    T0 = min(b[1] for b in bl)
    T1 = max(b[2] for b in bl)
    span = T1 - T0
    by_sm = {}
    for b in bl:
        by_sm.setdefault(b[0], []).append(b)
    nsm = len(by_sm)
    total = nsm * span
    gaps, head, tail = [], 0, 0
    for v in by_sm.values():
        v.sort(key=lambda b: b[1])
        head += v[0][1] - T0
        tail += T1 - v[-1][2]
        gaps += [b[1] - a[2] for a, b in zip(v, v[1:])]
    share = {p: sum(b[3 + i] for b in bl) / total for i, p in enumerate(PHASES)}
    share["gaps"] = sum(gaps) / total
    share["idle at the start"] = head / total
    share["idle at the end"] = tail / total
    return {
        "blocks": len(bl), "sms": nsm, "span": span,
        "fill": sum(b[2] - b[1] for b in bl) / total,
        "median": {p: statistics.median(b[3 + i] for b in bl) for i, p in enumerate(PHASES)},
        "block median": statistics.median(b[2] - b[1] for b in bl),
        "gap median": statistics.median(gaps) if gaps else 0,
        "drain last": sum(1 for b in bl if b[6] > 0) / len(bl),
        "share": share,
    }


def report(tag, s):
    us = lambda ns: f"{ns / 1e3:.2f}"
    print(f"[{tag}] {s['blocks']} blocks on {s['sms']} SMs, span {us(s['span'])} us; blocks fill {s['fill']:.4f}"
          f" of the SM-time; block median {us(s['block median'])} us, gap median {us(s['gap median'])} us")
    print("  median per block (us): " + ", ".join(f"{p} {us(v)}" for p, v in s["median"].items())
          + f"; the dQ warp ends last in {s['drain last']:.1%} of the blocks")
    print("  SM-time: " + ", ".join(f"{p} {v:.4f}" for p, v in s["share"].items())
          + f" (sum {sum(s['share'].values()):.4f})")


def self_test():
    """Two SMs, three blocks, figures worked out by hand."""
    lines = ["fbclk 0 0 0 1000 9000 10000 10500 11000",      # SM 0: 0 .. 11000 (drain 500)
             "fbclk 1 0 12000 12500 20000 21000 21000 20000",  # SM 0: 12000 .. 21000 (gap 1000)
             "fbclk 2 1 100 600 15000 16000 16000 16000",      # SM 1: 100 .. 16000
             "fbclk end 3",
             "fbclk 0 0 5 5 5 5 5 5", "fbclk end 2",            # a line short: dropped
             "fbclk 0 0 5 5 5 5 5 5"]                           # no end: dropped
    ls = read_launches(lines)
    assert len(ls) == 1, ls
    s = summarize(ls[0])
    total = 2 * 21000
    want = {"prologue": (1000 + 500 + 500) / total, "walk": (8000 + 7500 + 14400) / total,
            "epilogue": (1500 + 1000 + 1000) / total, "dQ drain": 500 / total, "gaps": 1000 / total,
            "idle at the start": 100 / total, "idle at the end": 5000 / total}
    for k, v in want.items():
        assert abs(s["share"][k] - v) < 1e-12, (k, s["share"][k], v)
    assert abs(sum(s["share"].values()) - 1) < 1e-12
    assert s["span"] == 21000 and s["sms"] == 2 and s["gap median"] == 1000
    assert abs(s["fill"] - (11000 + 9000 + 15900) / total) < 1e-12
    assert abs(s["drain last"] - 1 / 3) < 1e-12
    print("fb_clocks self-test: ok")


def main(argv):
    if argv[1:] == ["--self-test"]:
        self_test()
        return 0
    if len(argv) != 2:
        print("usage: python3 bench/fb_clocks.py KGATE_STDOUT | --self-test", file=sys.stderr)
        return 2
    try:
        with open(argv[1], errors="replace") as f:
            launches = read_launches(f)
    except OSError as e:
        print(f"fb_clocks: {argv[1]}: {e.strerror}", file=sys.stderr)
        return 2
    if not launches:
        print(f"fb_clocks: {argv[1]}: no complete launch (no 'fbclk end' line after as many block lines as it counts)", file=sys.stderr)
        return 1
    print(f"{len(launches)} complete launches")
    sums = [summarize(l) for l in launches]
    report("median launch", sorted(sums, key=lambda s: s["span"])[len(sums) // 2])
    report("last launch", sums[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
