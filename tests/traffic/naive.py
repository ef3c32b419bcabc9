"""A direct, deliberately simple replay (lists, nested loops) to check specplug.traffic.replay against."""

from __future__ import annotations


def ngram_propose(ctx: list[int], k: int, nmin: int, nmax: int) -> list[int]:
    """vLLM's rule read plainly: the longest n in [nmin, nmax] whose last n tokens occur earlier (ending
    before the last token), the earliest such occurrence, and up to k tokens after it within the context."""
    total = len(ctx)
    for n in range(min(nmax, total - 1), nmin - 1, -1):
        pat = ctx[total - n:]
        for i in range(0, total - n):  # occurrence ctx[i:i+n], ending at i+n-1 <= total-2
            if ctx[i:i + n] == pat:
                start = i + n
                return ctx[start:min(start + k, total)]
    return []


def replay(prompt: list[int], out: list[int], k: int, nmin: int = 2, nmax: int = 4) -> tuple[int, int]:
    """(steps, tokens emitted) for greedy acceptance of n-gram drafts at draft length k; steps start after the
    first output token (the prefill's)."""
    p, steps, tokens = 1, 0, 0
    while p < len(out):
        draft = ngram_propose(prompt + out[:p], k, nmin, nmax)
        a = 0
        while a < len(draft) and p + a < len(out) and draft[a] == out[p + a]:
            a += 1
        steps += 1
        tokens += a + 1
        p += a + 1
    return steps, tokens


def suffix_confirmed_local(prompt: list[int], out: list[int], k: int, depth: int = 24) -> list[int]:
    """Per output position: confirmed tokens of the suffix-decoding draft from this request alone (longest
    suffix of the context, up to depth, that occurs earlier; its most recent occurrence; at most
    min(k, match length) tokens, within the context)."""
    res = [0] * len(out)
    for p in range(1, len(out)):
        ctx = prompt + out[:p]
        total = len(ctx)
        for n in range(min(depth, total - 1), 0, -1):
            pat = ctx[total - n:]
            occ = [i for i in range(0, total - n) if ctx[i:i + n] == pat]
            if occ:
                start = occ[-1] + n
                draft = ctx[start:min(start + min(k, n), total)]
                a = 0
                while a < len(draft) and p + a < len(out) and draft[a] == out[p + a]:
                    a += 1
                res[p] = a
                break
    return res


def position_counts(prompt: list[int], out: list[int], k: int, nmin: int = 2, nmax: int = 4) -> tuple[list[int], list[int]]:
    """(trials, accepts) per draft position 1..k of the n-gram replay at draft length k: a position is tried
    when every earlier one was accepted and the log still has a token there."""
    trials, accepts = [0] * (k + 1), [0] * (k + 1)
    p = 1
    while p < len(out):
        draft = ngram_propose(prompt + out[:p], k, nmin, nmax)
        a = 0
        while a < len(draft) and p + a < len(out) and draft[a] == out[p + a]:
            a += 1
        for i in range(1, k + 1):
            if p + i - 1 >= len(out) or i > a + 1:
                break
            trials[i] += 1
            accepts[i] += i <= a
        p += a + 1
    return trials, accepts


def suffix_confirmed(prompt: list[int], out: list[int], earlier: list[list[int]], k: int = 8, depth: int = 24,
                     gram: int = 4) -> list[int]:
    """suffix_confirmed_local plus the outputs of earlier requests: when this request's own match is shorter
    than k, the most recent earlier occurrence of the last ``gram`` tokens, extended backwards (up to depth),
    is used instead if its match is longer."""
    res = [0] * len(out)
    for p in range(1, len(out)):
        ctx = prompt + out[:p]
        total = len(ctx)
        n, start = 0, 0
        for nn in range(min(depth, total - 1), 0, -1):
            occ = [i for i in range(0, total - nn) if ctx[i:i + nn] == ctx[total - nn:]]
            if occ:
                n, start = nn, occ[-1] + nn
                break
        src, mlen, lim = ctx, n, total
        if n < k and total >= gram and earlier:
            best = None
            for o in earlier:  # later requests, and later places in them, win
                for i in range(gram, len(o) + 1):
                    if o[i - gram:i] == ctx[total - gram:]:
                        best = (o, i)
            if best:
                o, end = best
                gl = gram
                while gl < min(depth, end, total) and o[end - gl - 1] == ctx[total - gl - 1]:
                    gl += 1
                if gl > n:
                    src, start, mlen, lim = o, end, gl, len(o)
        if mlen <= 0:
            continue
        draft = src[start:min(start + min(k, mlen), lim)]
        a = 0
        while a < len(draft) and p + a < len(out) and draft[a] == out[p + a]:
            a += 1
        res[p] = a
    return res


def bleu4(prompt: list[int], out: list[int]) -> float:
    """BLEU-4 as Papineni et al. define it, with the prompt as the one reference: clipped counts by
    counting each distinct n-gram in both lists, geometric mean of the four precisions, brevity penalty."""
    import math

    if not out:
        return 0.0
    log_sum = 0.0
    for n in range(1, 5):
        cand = [tuple(out[i:i + n]) for i in range(len(out) - n + 1)]
        ref = [tuple(prompt[i:i + n]) for i in range(len(prompt) - n + 1)]
        if not cand:
            return 0.0
        clipped = sum(min(cand.count(g), ref.count(g)) for g in set(cand))
        if clipped == 0:
            return 0.0
        log_sum += math.log(clipped / len(cand)) / 4
    brevity = 1.0 if len(out) > len(prompt) else math.exp(1 - len(prompt) / len(out))
    return brevity * math.exp(log_sum)
