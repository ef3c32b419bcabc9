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

from bisect import bisect_left

SUFFIX_MAX_DEPTH = 24  # vLLM's suffix_decoding_max_tree_depth default
SUFFIX_SPEC_FACTOR = 1.0  # suffix_decoding_max_spec_factor default: draft at most factor * match length tokens
GLOBAL_GRAM = 4  # previous outputs are indexed by their 4-grams (shorter cross-request matches are ignored)
GLOBAL_KEYS = 400_000  # keys per generation of the global index (two generations kept: bounded memory)


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
        steps, tokens, trials, accepts = self.steps, self.tokens, self.trials, self.accepts
        if not nz:
            for k in range(1, k_max + 1):
                steps[k] += length - 1
                tokens[k] += length - 1
            trials[1] += length - 1
            return
        n_nz = len(nz)
        for k in range(1, k_max + 1):
            p, s, j = 1, 0, 0
            full = k == k_max
            while p < length:
                j = bisect_left(nz, p, j)
                q = nz[j] if j < n_nz else length
                if q > p:  # a run of positions with nothing confirmed: one rejected step each
                    s += q - p
                    if full:
                        trials[1] += q - p
                    p = q
                    if p >= length:
                        break
                a = m[p]
                if a > k:
                    a = k
                s += 1
                if full:
                    r = length - p  # positions that can still be checked against the log
                    top = min(a + 1, k, r)
                    for i in range(1, top + 1):
                        trials[i] += 1
                    for i in range(1, a + 1):
                        accepts[i] += 1
                p += a + 1
            steps[k] += s
            tokens[k] += p - 1

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
        find = s.find
        m = [0] * length
        for p in range(1, length):
            t = plen + p
            if t <= nmin:
                continue
            # An occurrence must end before the last token (start <= t - n - 1): search s[0:t-1].
            at = find(s[t - nmin:t], 0, t - 1)
            if at < 0:
                continue  # no earlier occurrence of the shortest n-gram, so none of any longer one
            n = nmin
            for cand in range(min(nmax, t - 1), nmin, -1):
                hit = find(s[t - cand:t], 0, t - 1)
                if hit >= 0:
                    at, n = hit, cand
                    break
            start = at + n
            m[p] = _confirmed(s, start, min(start + k_max, t), t)
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
    as a rejection here, as a missing draft does there), and cross-request matches need 4 tokens. The global
    index holds two generations of GLOBAL_KEYS 4-grams: memory stays bounded on any file size.
    """

    def __init__(self, k_max: int = 8, depth: int = SUFFIX_MAX_DEPTH, factor: float = SUFFIX_SPEC_FACTOR) -> None:
        self.k_max, self.depth, self.factor = k_max, depth, factor
        self.tally = Tally(k_max)
        self._new: dict[str, tuple[str, int]] = {}
        self._old: dict[str, tuple[str, int]] = {}

    def _global(self, key: str) -> tuple[str, int] | None:
        hit = self._new.get(key)
        return hit if hit is not None else self._old.get(key)

    def confirmed(self, prompt: str, out: str) -> list[int]:
        s = prompt + out
        plen, length = len(prompt), len(out)
        k_max, depth, factor = self.k_max, self.depth, self.factor
        rfind = s.rfind
        g = GLOBAL_GRAM
        use_global = bool(self._new or self._old)
        m = [0] * length
        cur = depth  # the match at position t+1 is at most one longer than at t: start high, then shrink
        for p in range(1, length):
            t = plen + p
            n = min(cur + 1, depth, t - 1)
            at = -1
            while n > 0:
                at = rfind(s[t - n:t], 0, t - 1)
                if at >= 0:
                    break
                n -= 1
            cur = n
            src, start, mlen = s, at + n, n
            if use_global and t >= g and n < depth:
                hit = self._global(s[t - g:t])
                if hit is not None:
                    gs, gend = hit
                    # Extend the 4-gram match backwards (up to depth) to get the cross-request match length.
                    gl = g
                    lim = min(depth, t, gend)
                    while gl < lim and gs[gend - gl - 1] == s[t - gl - 1]:
                        gl += 1
                    if gl > n:
                        src, start, mlen = gs, gend, gl
            if mlen <= 0:
                continue
            cap = min(k_max, int(factor * mlen))
            if cap <= 0:
                continue
            if src is s:
                m[p] = _confirmed(s, start, min(start + cap, t), t)
            else:
                d = src[start:start + cap]
                f = s[t:t + len(d)]
                if d == f:
                    m[p] = len(d)
                else:
                    a, nn = 0, min(len(d), len(f))
                    while a < nn and d[a] == f[a]:
                        a += 1
                    m[p] = a
        return m

    def remember(self, out: str) -> None:
        """Put a finished request's output into the global index."""
        g = GLOBAL_GRAM
        if len(out) < g:
            return
        new = self._new
        for i in range(g, len(out) + 1):
            new[out[i - g:i]] = (out, i)
        if len(new) > GLOBAL_KEYS:
            self._old, self._new = new, {}

    def add(self, prompt: str, out: str) -> None:
        m = self.confirmed(prompt, out)
        self.tally.walk(m, [p for p, a in enumerate(m) if a], len(out))
        self.remember(out)
