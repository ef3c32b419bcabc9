"""The replay of replay.py, vectorised with numpy over a batch of requests (used when numpy is installed).

The batch's requests (prompt + output each) lie end to end in one array. Windows of n tokens are grouped by
sorting ``key << position bits | position``: equal n-grams sit together in position order, so within a run of one
n-gram in one request the first window is its earliest occurrence (vLLM's n-gram rule) and each window's
predecessor its most recent earlier one (suffix decoding's). Lengths grow one token at a time: the key of length
n + 1 is the run id of length n and the next token (exact, no hashing), and only windows that still repeat in
their request are sorted again. The same runs give the prompt-output overlap, repetition and BLEU-4 counts.

Cross-request suffix matches look up the last 4 tokens among earlier outputs of the current and previous
generation (see replay.GEN_REQUESTS) in a sorted index of their windows' hashes, kept from batch to batch (a
batch sorts its own windows and merges them in); a hit's tokens are compared, and on a hash collision the
lookup steps back to earlier windows with that hash, so the result is exact.

A batch's own-request part runs in a worker thread while the previous batch's cross-request part runs in the
caller's: with two cores the two overlap (numpy releases the GIL), and the order of the results is unchanged.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from specplug.traffic.replay import (
    BLEU_N,
    GEN_REQUESTS,
    GEN_TOKENS,
    GLOBAL_GRAM,
    SHAPE_GRAM,
    SUFFIX_MAX_DEPTH,
    SUFFIX_SPEC_FACTOR,
    Shape,
    Tally,
)

TOKEN_BITS = 21  # token ids are code points (< 0x110000)
MAX_BATCH_TOKENS = 1 << 20  # keeps run id + token + position within 63 bits
SORTED_LEVELS = 4  # lengths grouped by sorting; longer ones follow chains of earlier occurrences
# The suffix pool (two generations of outputs and a batch) stays under 2**22 tokens; places take POOL_BITS of a
# window's index key and its 4-gram's hash the rest. Hash hits are checked token by token.
POOL_BITS = 23
HASH_BITS = 63 - POOL_BITS
_MIX1, _MIX2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9)


def to_array(seqs: list[str]) -> np.ndarray:
    """Token strings (``chr(id)`` per token) laid end to end as int64 ids."""
    joined = "".join(seqs)
    return np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.int64)


def bleu4(matches: np.ndarray, totals: np.ndarray, out_len: np.ndarray, ref_len: np.ndarray) -> np.ndarray:
    """Sentence BLEU-4 per row: clipped n-gram matches and output n-gram counts (columns n = 1..4), uniform
    weights, brevity penalty against the reference length, no smoothing (a zero precision gives 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(totals > 0, matches / np.maximum(totals, 1), 0.0)
        logs = np.where(p > 0, np.log(np.where(p > 0, p, 1.0)), -np.inf).mean(axis=1)
        bp = np.where(out_len >= ref_len, 0.0, 1.0 - ref_len / np.maximum(out_len, 1))
        return np.where(out_len > 0, np.exp(logs + bp), 0.0)


def _lcp(src: np.ndarray, s0: np.ndarray, dl: np.ndarray, T: np.ndarray, t: np.ndarray, tend: np.ndarray) -> np.ndarray:
    """Per query: how many of ``src[s0 : s0 + dl]`` equal ``T[t:]`` before ``tend``."""
    out = np.zeros(len(t), np.int64)
    lim = np.minimum(dl, tend - t)
    live = np.flatnonzero(lim > 0)
    # The live queries' read positions and limits, compacted as they die (most die at the first token).
    a, b, lim = s0[live], t[live], lim[live]
    j = 0
    while live.size:
        eq = src[a] == T[b]
        j += 1
        out[live[eq]] = j
        eq &= lim > j  # room for one more
        live, a, b, lim = live[eq], a[eq] + 1, b[eq] + 1, lim[eq]
    return out


def _hash4(a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray, bits: int) -> np.ndarray:
    h = a.astype(np.uint64)
    for x in (b, c, d):
        h = h * _MIX1 + x.astype(np.uint64)
    h ^= h >> np.uint64(29)
    h *= _MIX2
    h ^= h >> np.uint64(32)
    return (h >> np.uint64(64 - bits)).astype(np.int64)


class _Local(NamedTuple):
    """A batch after its own-request part: its tokens and layout, its queries, their local suffix drafts."""

    T: np.ndarray
    plen: np.ndarray
    olen: np.ndarray
    base: np.ndarray
    obase: np.ndarray
    t: np.ndarray  # per query (output position p >= 1): context end in T
    tend: np.ndarray
    reqs_q: np.ndarray
    o_index: np.ndarray
    n_loc: np.ndarray  # local suffix match length
    m_loc: np.ndarray  # confirmed tokens of the local suffix draft


class FastReplay:
    """n-gram (``nmin..nmax``) and suffix (``depth``) replay at draft lengths 1..k_max, batch by batch; the
    tallies equal those of replay.NgramReplay and replay.SuffixReplay fed the same requests in order."""

    def __init__(self, k_max: int = 8, nmin: int = 2, nmax: int = 4, depth: int = SUFFIX_MAX_DEPTH,
                 factor: float = SUFFIX_SPEC_FACTOR, threaded: bool = True) -> None:
        self.k_max, self.nmin, self.nmax, self.depth, self.factor = k_max, nmin, nmax, depth, factor
        self._ngram, self._suffix = Tally(k_max), Tally(k_max)
        self._shape = Shape()
        self.threaded = threaded  # False: both parts in the caller's thread, batch by batch
        self._worker: ThreadPoolExecutor | None = None
        self._pending: Future[_Local] | None = None  # the batch whose own-request part is under way
        # Earlier outputs visible to the suffix proposer: tokens, and per request its start, length, generation.
        self._pool = np.zeros(0, np.int64)
        self._pool_start = np.zeros(0, np.int64)
        self._pool_len = np.zeros(0, np.int64)
        self._pool_gen = np.zeros(0, np.int64)
        # Their 4-gram windows as sorted ``hash << POOL_BITS | place``: a batch sorts only its own and merges.
        self._pool_index = np.zeros(0, np.int64)
        self._gen = self._gen_requests = self._gen_tokens = 0

    # The tallies: reading one first finishes the batch still under way.
    @property
    def ngram(self) -> Tally:
        self.flush()
        return self._ngram

    @property
    def suffix(self) -> Tally:
        self.flush()
        return self._suffix

    @property
    def shape(self) -> Shape:
        self.flush()
        return self._shape

    def add(self, prompts: list[str], outs: list[str]) -> None:
        """Replay requests in order (token strings), in batches of at most MAX_BATCH_TOKENS tokens. A request
        longer than that keeps only the end of its prompt (and of its output) that fits.

        Each batch's own-request part (n-gram, local suffix matches, shape) runs in a worker thread (numpy
        releases the GIL) while the previous batch's cross-request part runs here; the tallies wait for both."""
        room = MAX_BATCH_TOKENS
        if any(len(p) + len(o) > room for p, o in zip(prompts, outs, strict=True)):
            outs = [o[-room:] for o in outs]
            prompts = [p[len(p) - max(0, room - len(o)):] if len(p) + len(o) > room else p for p, o in zip(prompts, outs, strict=True)]
        i, n = 0, len(prompts)
        while i < n:
            j, size = i, 0
            while j < n and (j == i or size + len(prompts[j]) + len(outs[j]) <= MAX_BATCH_TOKENS):
                size += len(prompts[j]) + len(outs[j])
                j += 1
            if not self.threaded:
                self._cross(self._local(prompts[i:j], outs[i:j]))
            else:
                if self._worker is None:
                    self._worker = ThreadPoolExecutor(1, thread_name_prefix="specplug-replay")
                nxt = self._worker.submit(self._local, prompts[i:j], outs[i:j])
                self.flush()
                self._pending = nxt
            i = j

    def flush(self) -> None:
        """Finish the batch under way (its cross-request part)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            self._cross(pending.result())

    def close(self) -> None:
        """Finish the batch under way and stop the worker thread."""
        self.flush()
        if self._worker is not None:
            self._worker.shutdown()
            self._worker = None

    def _generations(self, olen: np.ndarray) -> np.ndarray:
        gens = np.empty(len(olen), np.int64)
        for r, n in enumerate(olen.tolist()):
            gens[r] = self._gen
            self._gen_requests += 1
            self._gen_tokens += n
            if self._gen_requests >= GEN_REQUESTS or self._gen_tokens >= GEN_TOKENS:
                self._gen += 1
                self._gen_requests = self._gen_tokens = 0
        return gens

    def _local(self, prompts: list[str], outs: list[str]) -> _Local:
        """A batch's own-request part: n-gram replay, shape counts and each position's local suffix draft.
        Touches only the n-gram tally and the shape (the worker runs one batch at a time, in order)."""
        plen = np.fromiter(map(len, prompts), np.int64, len(prompts))
        olen = np.fromiter(map(len, outs), np.int64, len(outs))
        seq = [p + o for p, o in zip(prompts, outs, strict=True)]
        T = to_array(seq)
        L = plen + olen
        base = np.zeros(len(L), np.int64)
        np.cumsum(L[:-1], out=base[1:])
        req = np.repeat(np.arange(len(L)), L)
        levels = self._levels(T, req, base, plen, olen)
        # Output positions p = 1..olen-1 of every request, as context ends t (global) and their request.
        has = olen >= 2
        reqs_q = np.repeat(np.arange(len(L))[has], olen[has] - 1)
        first_p = np.cumsum(np.r_[0, (olen[has] - 1)[:-1]])
        p = np.arange(len(reqs_q)) - np.repeat(first_p, olen[has] - 1) + 1
        t = base[reqs_q] + plen[reqs_q] + p
        tend = base[reqs_q] + L[reqs_q]
        obase = np.zeros(len(L), np.int64)
        np.cumsum(olen[:-1], out=obase[1:])
        o_index = obase[reqs_q] + p  # position in the batch's concatenated outputs
        total_out = int(olen.sum())

        m = np.zeros(total_out, np.int64)
        ng_n, ng_first = levels["ng_n"][t], levels["ng_first"][t]
        hit = ng_n > 0
        s0 = ng_first[hit] + ng_n[hit]
        dl = np.minimum(s0 + self.k_max, t[hit]) - s0
        m[o_index[hit]] = _lcp(T, s0, dl, T, t[hit], tend[hit])
        self._walk(self._ngram, m, obase, olen)

        # The local suffix draft of every position; the cross-request part replaces some of them.
        n_loc, prev = levels["best_n"][t], levels["best_prev"][t]
        cap = np.minimum((self.factor * n_loc).astype(np.int64), self.k_max)
        loc = n_loc > 0
        s0 = np.where(loc, prev + n_loc, 0)
        dl = np.where(loc, np.minimum(s0 + cap, t) - s0, 0)
        m_loc = np.zeros(len(t), np.int64)
        m_loc[loc] = _lcp(T, s0[loc], dl[loc], T, t[loc], tend[loc])
        return _Local(T, plen, olen, base, obase, t, tend, reqs_q, o_index, n_loc, m_loc)

    def _cross(self, b: _Local) -> None:
        """A batch's cross-request part, in file order: suffix matches among earlier outputs, the suffix tally
        and the pool update."""
        gens = self._generations(b.olen)
        pool = self._pool_now(b.T, b.base, b.plen, b.olen, gens)
        use_global, g_start, g_dl = self._global(b.T, b.t, b.reqs_q, b.n_loc, b.base, gens, pool)
        m_loc = b.m_loc
        if use_global.any():
            m_loc[use_global] = _lcp(pool[0], g_start, g_dl, b.T, b.t[use_global], b.tend[use_global])
        m = np.zeros(int(b.olen.sum()), np.int64)
        m[b.o_index] = m_loc
        self._walk(self._suffix, m, b.obase, b.olen)
        self._remember(pool)

    def _levels(self, T, req, base, plen, olen) -> dict[str, np.ndarray]:
        """Per context end t: the longest suffix (<= depth) seen earlier in the request and the start of its
        most recent occurrence; the longest n-gram (nmin..nmax) seen earlier and the start of its earliest one.
        Short lengths sort (they also give first occurrences and the shape counts); past SORTED_LEVELS each
        window's most recent occurrence follows from the previous length's: the most recent earlier window of
        length n whose next token agrees, found by walking the length-n chain of earlier occurrences."""
        N = len(T)
        pb = max(1, int(N).bit_length())
        mask = (1 << pb) - 1
        best_n = np.zeros(N + 1, np.int64)
        best_prev = np.full(N + 1, -1, np.int64)
        ng_n = np.zeros(N + 1, np.int64)
        ng_first = np.zeros(N + 1, np.int64)
        req_end = base + plen + olen  # per request (small tables: cheap to look up by request id)
        req_out = base + plen
        shape = self._shape
        nreq = len(plen)
        matches = np.zeros((nreq, BLEU_N))
        sorted_top = max(SORTED_LEVELS, self.nmax, BLEU_N, SHAPE_GRAM)
        top = max(self.depth, sorted_top)
        active, a_req, a_run = np.arange(N), req, T
        later = earlier = np.zeros(0, np.int64)
        for n in range(1, sorted_top + 1):
            if n > 1:
                fits = active + n <= req_end[a_req]
                active, a_req, a_run = active[fits], a_req[fits], a_run[fits]
            if active.size < 2:
                return self._levels_done(best_n, best_prev, ng_n, ng_first, matches, olen, plen)
            # Windows of one run at length n - 1 share a run id; one more token makes the key of length n.
            key = a_run if n == 1 else (a_run << TOKEN_BITS) | T[active + n - 1]
            packed = np.sort((key << pb) | active)
            si = packed & mask
            sk = packed >> pb
            rq = req[si]
            starts = np.empty(len(si), bool)
            starts[0] = True
            np.not_equal(sk[1:], sk[:-1], out=starts[1:])
            starts[1:] |= rq[1:] != rq[:-1]
            same = ~starts[1:]
            later, earlier = si[1:][same], si[:-1][same]
            if n <= self.depth:
                best_n[later + n] = n
                best_prev[later + n] = earlier
            at = np.flatnonzero(starts)
            sizes = np.diff(np.append(at, len(si)))
            if self.nmin <= n <= self.nmax or n <= BLEU_N or n == SHAPE_GRAM:
                first = np.repeat(si[at], sizes)
                if self.nmin <= n <= self.nmax:
                    q = np.flatnonzero(first != si)
                    ng_n[si[q] + n] = n
                    ng_first[si[q] + n] = first[q]
                pe = req_out[rq]
                in_out = si >= pe
                if n <= BLEU_N:
                    cp = np.add.reduceat((si + n <= pe).view(np.int8), at, dtype=np.int64)
                    co = np.add.reduceat(in_out.view(np.int8), at, dtype=np.int64)
                    matches[:, n - 1] = np.bincount(rq[at], weights=np.minimum(cp, co), minlength=nreq)
                if n == SHAPE_GRAM:
                    shape.overlap += int(np.count_nonzero(in_out & (first + n <= pe)))
                    shape.repeated += int(np.count_nonzero(in_out[1:][same] & ~(si[:-1] < pe[:-1])[same]))
            # Only windows that repeat in their request can repeat at the next length.
            rep = np.repeat(sizes > 1, sizes)
            active, a_req = si[rep], rq[rep]
            a_run = np.repeat(np.arange(len(at)), sizes)[rep]
        # Longer suffixes: windows that had an earlier occurrence at length n, extended by one token.
        prev_full = np.full(N, -1, np.int64)
        prev_full[later] = earlier
        idx = np.flatnonzero(prev_full >= 0)  # the windows with an earlier occurrence, in position order
        prv = prev_full[idx]
        room = req_end[req[idx]] - idx  # tokens from each window start to the end of its request
        for n in range(sorted_top, top):  # from length n to n + 1
            fits = room >= n + 1
            if not fits.all():
                prev_full[idx[~fits]] = -1
                idx, prv, room = idx[fits], prv[fits], room[fits]
            if not idx.size:
                break
            # Most windows keep their occurrence (its next token agrees too); the others walk back the chain.
            moved = np.flatnonzero(T[prv + n] != T[idx + n])
            if moved.size:
                new = prv[moved]
                pending = np.arange(len(moved))
                while pending.size:
                    j = prev_full[new[pending]]
                    new[pending] = j
                    pending = pending[j >= 0]
                    pending = pending[T[new[pending] + n] != T[idx[moved[pending]] + n]]
                prev_full[idx[moved]] = new  # after the walks: they read the length-n links
                prv[moved] = new
                if (new < 0).any():
                    keep = prv >= 0
                    idx, prv, room = idx[keep], prv[keep], room[keep]
            best_n[idx + n + 1] = n + 1
            best_prev[idx + n + 1] = prv
        return self._levels_done(best_n, best_prev, ng_n, ng_first, matches, olen, plen)

    def _levels_done(self, best_n, best_prev, ng_n, ng_first, matches, olen, plen) -> dict[str, np.ndarray]:
        shape = self._shape
        shape.grams += int(np.maximum(olen - SHAPE_GRAM + 1, 0).sum())
        totals = np.maximum(olen[:, None] - np.arange(BLEU_N)[None, :], 0)
        shape.bleu_sum += float(bleu4(matches, totals, olen, plen).sum())
        shape.bleu_requests += len(olen)
        return {"best_n": best_n, "best_prev": best_prev, "ng_n": ng_n, "ng_first": ng_first}

    def _pool_now(self, T, base, plen, olen, gens) -> tuple[np.ndarray, ...]:
        """Earlier outputs followed by this batch's: tokens, per request start, length and generation, and the
        sorted window index (the earlier outputs' merged with this batch's)."""
        outs = [T[b + p:b + p + o] for b, p, o in zip(base.tolist(), plen.tolist(), olen.tolist(), strict=True)]
        old = len(self._pool)
        tokens = np.concatenate([self._pool, *outs])
        if len(tokens) >= 1 << POOL_BITS:
            raise ValueError(f"suffix pool of {len(tokens)} tokens exceeds {1 << POOL_BITS}")
        new_starts = old + np.r_[0, np.cumsum(olen)[:-1]].astype(np.int64)
        starts = np.r_[self._pool_start, new_starts].astype(np.int64)
        g = GLOBAL_GRAM
        wcount = np.maximum(olen - g + 1, 0)
        wpos = np.repeat(new_starts, wcount) + np.arange(int(wcount.sum())) - np.repeat(np.r_[0, np.cumsum(wcount)[:-1]], wcount)
        keys = np.sort((_hash4(tokens[wpos], tokens[wpos + 1], tokens[wpos + 2], tokens[wpos + 3], HASH_BITS) << POOL_BITS) | wpos)
        # Two sorted runs: the stable sort (a merge sort) merges them in one linear pass.
        index = np.sort(np.concatenate([self._pool_index, keys]), kind="stable") if self._pool_index.size else keys
        return tokens, starts, np.r_[self._pool_len, olen].astype(np.int64), np.r_[self._pool_gen, gens].astype(np.int64), index

    def _global(self, T, t, reqs_q, n_loc, base, gens, pool_now):
        """Which queries take a cross-request draft, with its start (in the pool) and length."""
        g = GLOBAL_GRAM
        tl = t - base[reqs_q]
        want = (n_loc < self.k_max) & (tl >= g)
        none = np.zeros(len(t), bool)
        pool, starts, lens, pgen, index = pool_now
        nhist = len(self._pool_len)
        if not want.any() or not index.size:  # no earlier output has four tokens
            return none, np.zeros(0, np.int64), np.zeros(0, np.int64)
        ob, pmask = POOL_BITS, (1 << POOL_BITS) - 1
        q = np.flatnonzero(want)
        tq = t[q]
        qk = _hash4(T[tq - 4], T[tq - 3], T[tq - 2], T[tq - 1], HASH_BITS)
        rq = reqs_q[q]
        own_start = starts[nhist + rq]  # the query's own output and later ones are not earlier requests
        # The most recent window before the query's own output with the same hash; sorted needles keep the
        # binary searches in cache.
        needles = (qk << ob) | own_start
        order = np.argsort(needles)
        at = np.empty(len(q), np.int64)
        at[order] = np.searchsorted(index, needles[order], side="left")
        at -= 1
        ok = at >= 0
        cand = index[np.maximum(at, 0)]
        ok &= (cand >> ob) == qk
        cpos = cand & pmask
        same4 = ok.copy()
        for j in range(g):
            same4 &= pool[np.minimum(cpos + j, len(pool) - 1)] == T[tq - g + j]
        # A hash collision (another 4-gram, same hash): step back to earlier windows with that hash.
        bad = np.flatnonzero(ok & ~same4)
        while bad.size:
            at[bad] -= 1
            bad = bad[at[bad] >= 0]
            cand_b = index[at[bad]]
            bad = bad[(cand_b >> ob) == qk[bad]] if bad.size else bad
            if not bad.size:
                break
            cpos[bad] = index[at[bad]] & pmask
            hit = np.ones(len(bad), bool)
            for j in range(g):
                hit &= pool[cpos[bad] + j] == T[tq[bad] - g + j]
            same4[bad[hit]] = True
            bad = bad[~hit]
        ok = same4
        creq = np.searchsorted(starts, cpos, side="right") - 1
        ok &= pgen[creq] >= gens[rq] - 1
        gend = cpos + g - starts[creq]  # end of the matched 4-gram within its output
        src_len = lens[creq]
        # Extend the match backwards within that output (up to depth) and within this context.
        topv = np.minimum(np.minimum(self.depth, gend), tl[q])
        gl = np.full(len(q), g, np.int64)
        live = np.flatnonzero(ok & (gl < topv))
        while live.size:
            same = pool[starts[creq[live]] + gend[live] - gl[live] - 1] == T[tq[live] - gl[live] - 1]
            live = live[same]
            gl[live] += 1
            live = live[gl[live] < topv[live]]
        ok &= gl > n_loc[q]
        cap = np.minimum((self.factor * gl).astype(np.int64), self.k_max)
        dl = np.minimum(gend + cap, src_len) - gend
        use = np.zeros(len(t), bool)
        use[q[ok]] = True
        # A cross-request match that leaves no draft still replaces the local one (as replay.SuffixReplay does).
        return use, (starts[creq] + gend)[ok], np.maximum(dl[ok], 0)

    def _remember(self, pool_now) -> None:
        pool, starts, lens, pgen, index = pool_now
        keep = pgen >= self._gen - 1  # the generations a next request can still see
        if not keep.any():
            self._pool = self._pool_index = np.zeros(0, np.int64)
            self._pool_start = self._pool_len = self._pool_gen = np.zeros(0, np.int64)
            return
        first = int(np.argmax(keep))
        cut = int(starts[first])
        self._pool = pool[cut:].copy()
        self._pool_start = starts[first:] - cut
        self._pool_len = lens[first:]
        self._pool_gen = pgen[first:]
        # Places are the low bits: shifting kept ones down by cut leaves the hash bits (and the order) alone.
        self._pool_index = index[(index & ((1 << POOL_BITS) - 1)) >= cut] - cut if cut else index

    def _walk(self, tally: Tally, m: np.ndarray, obase: np.ndarray, olen: np.ndarray) -> None:
        """Tally.walk for every request and k at once: each row steps through its output in lockstep,
        jumping over runs of positions with nothing confirmed."""
        K = self.k_max
        reqs = np.flatnonzero(olen >= 2)
        if not reqs.size:
            return
        M = len(m)
        nxt = np.where(m > 0, np.arange(M), M)
        nxt = np.minimum.accumulate(nxt[::-1])[::-1]
        nr = len(reqs)
        k = np.repeat(np.arange(1, K + 1), nr)
        start = np.tile(obase[reqs] + 1, K)
        p = start.copy()
        end = np.tile(obase[reqs] + olen[reqs], K)
        st = np.zeros(len(p), np.int64)
        acc_hist = np.zeros(K + 1, np.int64)
        top_hist = np.zeros(K + 1, np.int64)
        steps = np.zeros(K + 1, np.int64)
        tokens = np.zeros(K + 1, np.int64)

        def finish(done: np.ndarray) -> None:
            steps[:] += np.bincount(k[done], weights=st[done], minlength=K + 1).astype(np.int64)
            tokens[:] += np.bincount(k[done], weights=(p - start)[done], minlength=K + 1).astype(np.int64)

        while p.size:
            q = np.minimum(nxt[p], end)
            run = q - p
            st += run
            zero = int(run[k == K].sum())
            acc_hist[0] += zero
            top_hist[1] += zero
            p = q
            done = p >= end
            if done.any():
                finish(done)
                keep = ~done
                k, start, p, end, st = k[keep], start[keep], p[keep], end[keep], st[keep]
                if not p.size:
                    break
            a = np.minimum(m[p], k)
            st += 1
            topk = k == K
            if topk.any():
                at = a[topk]
                acc_hist += np.bincount(np.minimum(at, K), minlength=K + 1)
                tv = np.minimum(np.minimum(at + 1, K), (end - p)[topk])
                top_hist += np.bincount(tv, minlength=K + 1)
            p = p + a + 1
            done = p >= end
            if done.any():
                finish(done)
                keep = ~done
                k, start, p, end, st = k[keep], start[keep], p[keep], end[keep], st[keep]
        for i in range(1, K + 1):
            tally.steps[i] += int(steps[i])
            tally.tokens[i] += int(tokens[i])
        run_a = run_t = 0
        for i in range(K, 0, -1):
            run_a += int(acc_hist[i])
            run_t += int(top_hist[i])
            tally.accepts[i] += run_a
            tally.trials[i] += run_t
