"""Replaying copy-based proposers over logged completions at greedy acceptance.

A logged completion is what the target produced, so at temperature 0 a draft token is accepted exactly when
it equals the logged next token. For every output position we compute ``m(p)``: how many leading tokens of
the proposer's longest draft (``k_max``) the log confirms, with the context being the prompt plus the logged
output so far (rejected drafts never enter the context). A run at draft length ``k`` then walks the output:
the step at ``p`` accepts ``min(m(p), k)`` tokens and emits one more (the bonus), so ``p`` advances by that
plus one. The first output token comes from the prefill, so steps start at ``p = 1``. A position with no draft
(no match) is a rejection at draft position 1, as it is for the stack's counters.

Token sequences are strings (one character per token id, see tokens.py) so every search is ``str.find`` /
``str.rfind`` in C; the per-position Python work is a few calls.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from itertools import repeat

SUFFIX_MAX_DEPTH = 24  # vLLM's suffix_decoding_max_tree_depth default
SUFFIX_SPEC_FACTOR = 1.0  # suffix_decoding_max_spec_factor default: draft at most factor * match length tokens
GLOBAL_GRAM = 4  # previous outputs are indexed by their 4-grams (shorter cross-request matches are ignored)
# Earlier outputs are kept in generations: one closes after GEN_REQUESTS requests or GEN_TOKENS output tokens,
# and a request sees its own generation and the one before (the last 1,000-2,000 answers; Arctic keeps 10,000
# by default, but past a thousand or so an older answer adds little), so memory stays bounded on any file.
GEN_REQUESTS = 1000
GEN_TOKENS = 250_000


class Tally:
    """Per-k step counts and per-position acceptance counts, summed over requests."""

    def __init__(self, k_max: int) -> None:
        self.k_max = k_max
        self.steps = [0] * (k_max + 1)  # steps[k]: verification steps a run at draft length k takes
        self.tokens = [0] * (k_max + 1)  # tokens[k]: tokens those steps emitted (bonus included)
        self.trials = [0] * (k_max + 1)  # trials[i]: steps at k_max where positions < i were all accepted
        self.accepts = [0] * (k_max + 1)  # accepts[i]: ... and position i was accepted too
        self.drafts = 0  # steps at k_max where the proposer offered a draft
        self.drafted = 0  # draft tokens offered at k_max

    def walk(self, m: list[int], nz: list[int], length: int) -> None:
        """Add one request: ``m[p]`` confirmed draft tokens at output position p; ``nz`` the p with m[p] > 0."""
        if length < 2:
            return
        k_max = self.k_max
        steps, tokens = self.steps, self.tokens
        if not nz:
            for k in range(1, k_max + 1):
                steps[k] += length - 1
                tokens[k] += length - 1
            self.trials[1] += length - 1
            return
        dense = 2 * len(nz) > length
        n_nz = len(nz)
        for k in range(1, k_max + 1):
            p, s = 1, 0
            if dense:  # mostly drafts that land: step through
                while p < length:
                    a = m[p]
                    s += 1
                    p += (a if a < k else k) + 1
            else:  # mostly nothing confirmed: jump over the runs of zeros
                j = 0
                while p < length:
                    j = bisect_left(nz, p, j)
                    q = nz[j] if j < n_nz else length
                    if q > p:
                        s += q - p
                        p = q
                        if p >= length:
                            break
                    a = m[p]
                    s += 1
                    p += (a if a < k else k) + 1
            steps[k] += s
            tokens[k] += p - 1
        self._positions(m, length)

    def _positions(self, m: list[int], length: int) -> None:
        # Per-position counts at k_max, from a histogram of the steps' accepted counts and checkable depths.
        k_max = self.k_max
        acc_hist = [0] * (k_max + 1)
        top_hist = [0] * (k_max + 1)
        p = 1
        while p < length:
            a = m[p]
            if a > k_max:
                a = k_max
            top = a + 1  # positions tried: the accepted ones and the first rejected one ...
            if top > k_max:
                top = k_max
            if top > length - p:  # ... unless the log ends first
                top = length - p
            acc_hist[a] += 1
            top_hist[top] += 1
            p += a + 1
        run_a = run_t = 0
        for i in range(k_max, 0, -1):
            run_a += acc_hist[i]
            run_t += top_hist[i]
            self.accepts[i] += run_a
            self.trials[i] += run_t

    def position_rates(self) -> list[float]:
        """P(position i accepted | positions < i accepted), i = 1..k_max (0 where never reached)."""
        return [self.accepts[i] / self.trials[i] if self.trials[i] else 0.0 for i in range(1, self.k_max + 1)]

    def acceptance_length(self, k: int) -> float:
        if not 1 <= k <= self.k_max:
            raise ValueError(f"k={k} is outside 1..{self.k_max}")
        return self.tokens[k] / self.steps[k] if self.steps[k] else 1.0


def _confirmed(s: str, start: int, end: int, t: int) -> int:
    """How many of the draft ``s[start:end]`` equal the logged continuation ``s[t:]``."""
    d = s[start:end]
    f = s[t:t + len(d)]
    if d == f:
        return len(d)
    n = min(len(d), len(f))
    a = 0
    while a < n and d[a] == f[a]:
        a += 1
    return a


class NgramReplay:
    """vLLM's n-gram proposer: the longest n in [prompt_lookup_min, prompt_lookup_max] whose last-n tokens
    occurred earlier in prompt + output so far; of the occurrences of that n-gram, the *earliest* (vLLM's
    reverse-KMP keeps the last match it sees in the reversed sequence); propose up to k tokens that followed it,
    fewer when the context ends first."""

    def __init__(self, k_max: int = 8, nmin: int = 2, nmax: int = 4) -> None:
        if not 1 <= nmin <= nmax:
            raise ValueError("need 1 <= prompt_lookup_min <= prompt_lookup_max")
        self.k_max, self.nmin, self.nmax = k_max, nmin, nmax
        self.tally = Tally(k_max)

    def confirmed(self, prompt: str, out: str) -> list[int]:
        s = prompt + out
        plen, length = len(prompt), len(out)
        k_max, nmin, nmax = self.k_max, self.nmin, self.nmax
        m = [0] * length
        # Output positions p = 1..length-1 with a context of t = plen + p tokens; the shortest n-gram first,
        # for all of them at once (map runs the searches in C): without it no longer n-gram can match either.
        ts = [t for t in range(plen + 1, plen + length) if t > nmin]
        if not ts:
            return m
        # An occurrence must end before the last token (start <= t - n - 1): search s[0:t-1].
        hits = list(map(s.find, [s[t - nmin:t] for t in ts], repeat(0), [t - 1 for t in ts]))
        live = [(t, h) for t, h in zip(ts, hits, strict=True) if h >= 0]
        found = {t: (h, nmin) for t, h in live}
        todo = [t for t, _ in live]
        for n in range(nmax, nmin, -1):  # longest first: a position keeps the first n that matches
            fits = [t for t in todo if t > n]  # an n-gram needs n + 1 tokens of context to occur earlier
            if not fits:
                continue
            got = list(map(s.find, [s[t - n:t] for t in fits], repeat(0), [t - 1 for t in fits]))
            settled = set()
            for t, h in zip(fits, got, strict=True):
                if h >= 0:
                    found[t] = (h, n)
                    settled.add(t)
            if settled:  # shorter n are tried on the rest only
                todo = [t for t in todo if t not in settled]
        slen = len(s)
        pt = ps = pm = pd = -9  # the previous position's t, draft start, confirmed count and draft length
        for t, (h, n) in found.items():  # in order of t
            start = h + n  # <= t - 1: the draft's first token is in the context
            end = start + k_max
            if end > t:
                end = t
            dl = end - start
            if t == pt + 1 and start == ps + 1 and pm > 0:
                # The same source run one token on: the previous comparisons carry over, shifted by one.
                if pm < pd:
                    a = pm - 1 if pm - 1 < dl else dl
                else:
                    a = pd - 1 if pd - 1 < dl else dl
                    while a < dl and t + a < slen and s[start + a] == s[t + a]:
                        a += 1
            elif s[start] != s[t]:
                a = 0
            else:
                a = _confirmed(s, start, end, t)
            m[t - plen] = a
            pt, ps, pm, pd = t, start, a, dl
        return m

    def add(self, prompt: str, out: str) -> None:
        m = self.confirmed(prompt, out)
        self.tally.walk(m, [p for p, a in enumerate(m) if a], len(out))


class SuffixReplay:
    """Suffix decoding (Arctic Inference, vLLM ``method: suffix``), path (non-tree) speculation.

    Two sources, as in Arctic's two suffix trees: this request's prompt + output so far, and the outputs of
    earlier requests in the file (its global cache). The draft continues the longest suffix of the context
    (up to SUFFIX_MAX_DEPTH tokens) found in either, at most ``SUFFIX_SPEC_FACTOR * match length`` tokens.
    Simplifications, said plainly: the continuation is that of the most recent occurrence rather than the
    most frequent child of the tree node, there is no min_token_prob cut-off (a draft it would prune counts
    as a rejection here, as a missing draft does there), cross-request matches need 4 tokens and are looked up
    only when this request's own match is shorter than k_max. The global index holds two generations of
    earlier outputs (GEN_REQUESTS, GEN_TOKENS): memory stays bounded on any file size.
    """

    def __init__(self, k_max: int = 8, depth: int = SUFFIX_MAX_DEPTH, factor: float = SUFFIX_SPEC_FACTOR) -> None:
        self.k_max, self.depth, self.factor = k_max, depth, factor
        self.tally = Tally(k_max)
        self._new: dict[str, tuple[str, int]] = {}
        self._old: dict[str, tuple[str, int]] = {}
        self._gen_requests = self._gen_tokens = 0

    def _global(self, key: str) -> tuple[str, int] | None:
        hit = self._new.get(key)
        return hit if hit is not None else self._old.get(key)

    def confirmed(self, prompt: str, out: str) -> list[int]:
        s = prompt + out
        plen, length, slen = len(prompt), len(out), len(prompt) + len(out)
        k_max, depth, factor = self.k_max, self.depth, self.factor
        rfind = s.rfind
        g = GLOBAL_GRAM
        lookup = self._global if (self._new or self._old) else None
        m = [0] * length
        cur = depth  # the match at position t+1 is at most one longer than at t: start high, then shrink
        psrc, ps, pm, pd = None, -9, 0, 0  # the previous position's draft source, start, confirmed, length
        for p in range(1, length):
            t = plen + p
            n = cur + 1
            if n > depth:
                n = depth
            if n > t - 1:
                n = t - 1
            at = -1
            while n > 0:
                at = rfind(s[t - n:t], 0, t - 1)
                if at >= 0:
                    break
                n -= 1
            cur = n
            src, start, mlen, lim = s, at + n, n, t  # a local draft may not run past the context
            # The global index only matters when the local match is too short for a full-length draft.
            if lookup is not None and n < k_max and t >= g:
                hit = lookup(s[t - g:t])
                if hit is not None:
                    gs, gend = hit
                    # Extend the 4-gram match backwards (up to depth) to get the cross-request match length.
                    gl = g
                    top = depth if depth < gend else gend
                    if top > t:
                        top = t
                    while gl < top and gs[gend - gl - 1] == s[t - gl - 1]:
                        gl += 1
                    if gl > n:
                        src, start, mlen, lim = gs, gend, gl, len(gs)
            if mlen <= 0:
                psrc = None
                continue
            cap = int(factor * mlen)
            if cap > k_max:
                cap = k_max
            end = start + cap
            if end > lim:
                end = lim
            dl = end - start
            if dl <= 0:
                psrc = None
                continue
            if src is psrc and start == ps + 1 and pm > 0:
                # The same source run one token on: the previous comparisons carry over, shifted by one.
                if pm < pd:
                    a = pm - 1 if pm - 1 < dl else dl
                else:
                    a = pd - 1 if pd - 1 < dl else dl
                    while a < dl and t + a < slen and src[start + a] == s[t + a]:
                        a += 1
            elif src[start] != s[t]:
                a = 0
            else:
                a = 0
                while a < dl and t + a < slen and src[start + a] == s[t + a]:
                    a += 1
            m[p] = a
            psrc, ps, pm, pd = src, start, a, dl
        return m

    def remember(self, out: str) -> None:
        """Put a finished request's output into the global index."""
        g = GLOBAL_GRAM
        if len(out) >= g:
            # Later occurrences overwrite earlier ones: the index keeps each 4-gram's most recent place.
            self._new.update(zip([out[i - g:i] for i in range(g, len(out) + 1)], zip(repeat(out), range(g, len(out) + 1)), strict=True))
        self._gen_requests += 1
        self._gen_tokens += len(out)
        if self._gen_requests >= GEN_REQUESTS or self._gen_tokens >= GEN_TOKENS:
            self._old, self._new = self._new, {}
            self._gen_requests = self._gen_tokens = 0

    def add(self, prompt: str, out: str) -> None:
        m = self.confirmed(prompt, out)
        self.tally.walk(m, [p for p, a in enumerate(m) if a], len(out))
        self.remember(out)


BLEU_N = 4  # BLEU-4
SHAPE_GRAM = 4  # overlap and repetition count output 4-grams


def bleu4(prompt: str, out: str) -> float:
    """Sentence BLEU-4 of the output against its prompt as the one reference, over tokens: clipped n-gram
    precisions for n = 1..4 with uniform weights, times the brevity penalty (output shorter than the prompt);
    no smoothing, so an output sharing no 4-gram with its prompt scores 0."""
    if not out:
        return 0.0
    logs = 0.0
    for n in range(1, BLEU_N + 1):
        total = len(out) - n + 1
        if total <= 0:
            return 0.0
        mine = Counter(out[i:i + n] for i in range(total))
        ref = Counter(prompt[i:i + n] for i in range(len(prompt) - n + 1))
        hits = sum(min(c, ref[g]) for g, c in mine.items())
        if not hits:
            return 0.0
        logs += math.log(hits / total) / BLEU_N
    penalty = 0.0 if len(out) >= len(prompt) else 1.0 - len(prompt) / len(out)
    return math.exp(logs + penalty)


def shape_counts(prompt: str, out: str) -> tuple[int, int, int]:
    """(output 4-grams, of them found in the prompt, of them repeating an earlier output 4-gram)."""
    g = SHAPE_GRAM
    n = len(out) - g + 1
    if n <= 0:
        return 0, 0, 0
    grams = [out[i:i + g] for i in range(n)]
    repeated = n - len(set(grams))
    if len(prompt) < g:
        return n, 0, repeated
    pset = {prompt[i:i + g] for i in range(len(prompt) - g + 1)}
    return n, sum(map(pset.__contains__, grams)), repeated


class Shape:
    """Sums over requests: output 4-grams, of them found in the prompt, of them repeating an earlier output
    4-gram; and BLEU-4 of each output against its prompt."""

    def __init__(self) -> None:
        self.grams = self.overlap = self.repeated = 0
        self.bleu_sum = 0.0
        self.bleu_requests = 0


class PyReplay:
    """Both proposers and the shape counts, request by request in plain Python (when numpy is missing)."""

    def close(self) -> None:
        """Nothing to stop: the plain replay runs in the caller's thread."""

    def __init__(self, k_max: int = 8, nmin: int = 2, nmax: int = 4) -> None:
        self._ngram, self._suffix = NgramReplay(k_max, nmin, nmax), SuffixReplay(k_max)
        self.ngram, self.suffix = self._ngram.tally, self._suffix.tally
        self.shape = Shape()

    def add(self, prompts: list[str], outs: list[str]) -> None:
        sh = self.shape
        for prompt, out in zip(prompts, outs, strict=True):
            g, o, r = shape_counts(prompt, out)
            sh.grams, sh.overlap, sh.repeated = sh.grams + g, sh.overlap + o, sh.repeated + r
            sh.bleu_sum += bleu4(prompt, out)
            sh.bleu_requests += 1
            self._ngram.add(prompt, out)
            self._suffix.add(prompt, out)
