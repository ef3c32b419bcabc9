"""Embedded runtime vs transformers, same model, prompts and machine, in one run.

    python benchmarks/embedded.py [--max-tokens 96] [--k 4] [--batches 1,4,16] [--threads N] [--repeats 3]
                                  [--device auto|cpu|cuda[:N]] [--dtype float32|bfloat16|float16|auto]

Target: SmolLM2-135M-Instruct (packaged, see specplug.runtime.smollm2); drafter: its distilled copy
(smollm2-135m-draft). Methods: plain greedy decoding (transformers ``generate`` and specplug), specplug n-gram,
specplug draft model, transformers ``prompt_lookup_num_tokens`` and transformers ``assistant_model``, all with
the same k; and specplug's paced variants, which choose each step's draft length (up to k) from measured pass
costs (specplug.runtime.pacing). N-gram matches are each side's defaults: transformers tries 2 tokens then 1,
specplug 4 down to 2 with a fixed k and 4 down to 1 paced (specplug.runtime.models.ngram_match). Every
method's greedy tokens are checked against the workload's first run (transformers' plain decoding): "same" is
yes, or @n where n tokens agreed before the first difference (the fewest over the repeats). In float32 they
agree; in bfloat16 on a GPU even transformers' own plain decoding differed between repeats (on an H200), since
a greedy tie there depends on the pass's shape, so the benchmark runs in float32 unless told otherwise.
Columns: tokens/s (best of the interleaved repeats), speedup over transformers' plain decoding and over
specplug's own plain decoding, mean acceptance length, same tokens, and specplug / transformers on the same
technique; each ratio is the median over repeats of the ratio within one repeat, whose runs are neighbours in
an order that reverses every other repeat. specplug's drafter drafts from the packaged drafter's draft
vocabulary, the 8192 tokens the target's text uses most (as ``specplug generate`` runs it; ``--draft-vocab
full`` drafts from all 49152), so its LM head multiplies a sixth of the rows; transformers' assistant has no
such option and scores every token. Transformers runs on its own copy of each model, as loaded: on a CPU
specplug's decoder lays weights out for faster products (specplug.runtime.decoder.CPU_LAYOUT) and, on Linux,
in huge pages (HUGE_PAGES), and over shared weights transformers would get part of that speed-up. Workloads:
code-edit (the answer repeats most of the prompt), code-rewrite (an edit the model answers with rewritten
code, so little of the answer is in the prompt), rag-summary (quotes its context), free-chat. Their prompts
were written for this benchmark by the specplug authors (Apache-2.0, like the repository).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling _servers and _prompts
from _prompts import ITEMS_CODE  # noqa: E402

REWRITE_CODE = "import json\nfrom pathlib import Path\n\n\n" + ITEMS_CODE + '''

def cheapest(items):
    best = None
    for item in items:
        if best is None or item["price"] < best["price"]:
            best = item
    return best
'''

# The code-edit file: small enough that SmolLM2-135M answers with the file itself (it copies it, and then
# stops or goes on with code of its own), which is the workload's shape: an answer that repeats most of the
# prompt. Given REWRITE_CODE instead, the model rewrites the functions rather than repeats them, so that
# workload ("code-rewrite") shows prompt lookup when little of the answer is in the prompt.
EDIT_CODE = '''def add(a, b):
    return a + b


def subtract(a, b):
    return a - b


def multiply(a, b):
    return a * b


def divide(a, b):
    if b == 0:
        raise ValueError("cannot divide by zero")
    return a / b


def average(numbers):
    if not numbers:
        raise ValueError("no numbers given")
    return sum(numbers) / len(numbers)


class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        if not self.items:
            raise IndexError("pop from an empty stack")
        return self.items.pop()

    def peek(self):
        if not self.items:
            raise IndexError("peek at an empty stack")
        return self.items[-1]

    def size(self):
        return len(self.items)
'''

RAG = """Context:
The Rhine is a river that begins in the Swiss canton of Graubunden in the southeastern Swiss Alps. It forms
part of the Swiss-Liechtenstein, Swiss-Austrian and Swiss-German borders, then flows through the Rhineland
and eventually empties into the North Sea in the Netherlands. It is the second-longest river in Central and
Western Europe, after the Danube, at about 1,230 km. The Rhine and the Danube formed much of the northern
inland frontier of the Roman Empire, and since those days the Rhine has been a vital navigable waterway
carrying trade and goods deep inland. Its importance as a waterway in the Holy Roman Empire is shown by the
many castles and fortifications built along it.

Question: Where does the Rhine begin and where does it end? Quote the sentences from the context that say so."""

WORKLOADS = {
    "code-edit": "Rename the function `divide` to `safe_divide` in this Python file and print the whole updated "
    "file.\n\n```python\n" + EDIT_CODE + "```",
    "code-rewrite": "Rename the function `load_items` to `read_items` everywhere in this code and print the whole "
    "updated file, nothing else:\n\n" + REWRITE_CODE,
    "rag-summary": RAG,
    "free-chat": "Write a short friendly paragraph about why people enjoy walking in the mountains.",
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    ap.add_argument("--dtype", default="float32",
                    help="float32 (where greedy tokens can be compared), bfloat16, float16 or auto (the runtime's: "
                         "bfloat16 on a GPU)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per measurement, interleaved; the best counts")
    ap.add_argument("--adaptive", action="store_true", help="adaptive draft length for specplug")
    ap.add_argument("--draft-vocab", choices=("packaged", "full"), default="packaged",
                    help="specplug's drafter drafts from the packaged drafter's draft vocabulary (as `specplug "
                         "generate` runs it) or from every token")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specplug.runtime import smollm2
    from specplug.runtime.decoder import lean
    from specplug.runtime.engine import GenerationParams, SpeculativeEngine
    from specplug.runtime.models import draft_vocab, ngram_match, resolve_device, resolve_dtype
    from specplug.runtime.proposers import DraftModelProposer, NgramProposer

    dev = resolve_device(args.device)
    dt = resolve_dtype(args.dtype, dev)
    tok = AutoTokenizer.from_pretrained(str(smollm2.ensure_target()))
    def load(path):
        return AutoModelForCausalLM.from_pretrained(str(path), dtype=dt).to(dev).eval()

    target, draft = load(smollm2.ensure_target()), load(smollm2.ensure_draft())
    hf_target, hf_draft = load(smollm2.ensure_target()), load(smollm2.ensure_draft())
    k = args.k
    # transformers reads the assistant's draft length from the assistant's config (default 20, cut short where
    # its confidence falls below 0.4, as specplug's drafter does); give it the same k as everyone else.
    hf_draft.generation_config.num_assistant_tokens = k
    def ngram() -> NgramProposer:
        return NgramProposer(*ngram_match(paced=False))

    def ngram_paced() -> NgramProposer:
        return NgramProposer(*ngram_match(paced=True))

    vocab = draft_vocab(smollm2.DRAFT_NAME) if args.draft_vocab == "packaged" else None

    def drafter() -> DraftModelProposer:
        return DraftModelProposer(draft, dev, vocab=vocab)

    engines = {
        "plain": SpeculativeEngine(target, tok, None, k=k),
        "ngram": SpeculativeEngine(target, tok, ngram, k=k, adaptive=args.adaptive),
        "ngram paced": SpeculativeEngine(target, tok, ngram_paced, k=k, paced=True),
        "draft": SpeculativeEngine(target, tok, drafter, k=k, adaptive=args.adaptive),
        "draft paced": SpeculativeEngine(target, tok, drafter, k=k, paced=True),
    }
    prompts = {
        name: tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False)
        for name, text in WORKLOADS.items()
    }
    ids = {name: tok(p, add_special_tokens=False).input_ids for name, p in prompts.items()}
    n = args.max_tokens
    params = GenerationParams(max_new_tokens=n)

    # Both sides stop at EOS or after n tokens and count the EOS they produce as a generated token, so they
    # decode the same sequence (forcing n tokens with min_new_tokens would ban EOS and change the text).
    gcfg = copy.deepcopy(target.generation_config)
    gcfg.pad_token_id = tok.eos_token_id
    gcfg.do_sample = False
    eos = tok.eos_token_id

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def hf(name: str, n: int = n, lookup: int = 0, **kw) -> tuple[list[int], float, float]:
        x = torch.tensor([ids[name]], device=dev)
        cfg = copy.deepcopy(gcfg)  # one config per call: transformers deprecates mixing it with keyword options
        cfg.max_new_tokens = n
        if lookup:
            cfg.prompt_lookup_num_tokens = lookup
        sync()
        t = time.perf_counter()
        with torch.inference_mode():
            out = hf_target.generate(x, generation_config=cfg, **kw)
        sync()
        secs = time.perf_counter() - t
        toks = out[0, x.shape[1] :].tolist()
        return toks, secs, float("nan")

    def sp(engine: str, name: str, n: int = n) -> tuple[list[int], float, float]:
        sync()
        t = time.perf_counter()
        r = engines[engine].generate([ids[name]], GenerationParams(max_new_tokens=n))[0]
        sync()
        toks = r.tokens + ([eos] if r.finish_reason == "stop" else [])
        return toks, time.perf_counter() - t, r.stats.mean_acceptance_length

    # Each pair that is compared sits side by side (paced n-gram between its two baselines), so the runs a ratio
    # divides are seconds apart; odd repeats run the list backwards, so a drift in load favours neither side.
    methods = {
        "hf plain": lambda w, n=n: hf(w, n),
        "specplug plain": lambda w, n=n: sp("plain", w, n),
        "sp ngram paced": lambda w, n=n: sp("ngram paced", w, n),
        "hf prompt-lookup": lambda w, n=n: hf(w, n, lookup=k),
        "specplug ngram": lambda w, n=n: sp("ngram", w, n),
        "hf assistant": lambda w, n=n: hf(w, n, assistant_model=hf_draft),
        "sp draft paced": lambda w, n=n: sp("draft paced", w, n),
        "specplug draft": lambda w, n=n: sp("draft", w, n),
    }
    # Warm up every path once (allocator, kernels, lazy imports).
    for fn in methods.values():
        fn("free-chat", 4)
    # specplug's decoders move their weights into huge pages after a few hundred forwards (a server has long
    # since; see specplug.runtime.decoder.HUGE_PAGES): here before the timing, not during it.
    decoders = [e.target for e in engines.values()]
    decoders.append(lean(draft, None if vocab is None else torch.tensor(vocab)))
    for d in decoders:
        job = d.huge_pages_now() if hasattr(d, "huge_pages_now") else None
        if job is not None:
            job.join()
    print(f"device={dev} dtype={dt} threads={torch.get_num_threads()} k={k} max_new_tokens={n} "
          f"draft vocabulary={len(vocab) if vocab else 'all'} "
          f"prompt tokens: {', '.join(f'{w}={len(v)}' for w, v in ids.items())}")
    runs: dict[tuple[str, str], list[float]] = {}  # tok/s per repeat
    accept: dict[tuple[str, str], float] = {}
    differ: dict[tuple[str, str], list[int | None]] = {}  # per repeat: where tokens first differ (None: same)
    refs: dict[str, list[int]] = {}  # each workload's reference: the first run's tokens (all must agree)
    # Other processes share this machine; interleaving the methods keeps a burst of load from landing on one
    # method only, and each ratio is the median over repeats of the ratio within one repeat (runs seconds
    # apart), which drifting load moves far less than it moves either speed.
    for rep in range(args.repeats):
        for w in WORKLOADS:
            for m, fn in list(methods.items())[:: -1 if rep % 2 else 1]:
                toks, secs, mal = fn(w)
                ref = refs.setdefault(w, toks)
                runs.setdefault((w, m), []).append(len(toks) / secs)
                accept[(w, m)] = mal
                differ.setdefault((w, m), []).append(_first_difference(toks, ref))

    def ratio(w: str, m: str, base: str) -> float:
        return statistics.median(a / b for a, b in zip(runs[(w, m)], runs[(w, base)], strict=True))

    header = (f"{'workload':<12} {'method':<17} {'tok/s':>7} {'vs hf plain':>11} {'vs sp plain':>11} {'acc.len':>7} "
              f"{'same':>5} {'sp/hf':>6}")
    print("tok/s: best of the repeats; ratios: median over repeats of the ratio within a repeat")
    print(header)
    print("-" * len(header))
    pairs = {"specplug plain": "hf plain", "specplug ngram": "hf prompt-lookup", "specplug draft": "hf assistant",
             "sp ngram paced": "hf prompt-lookup", "sp draft paced": "hf assistant"}
    for w in WORKLOADS:
        for m in methods:
            tps, mal = max(runs[(w, m)]), accept[(w, m)]
            at = [d for d in differ[(w, m)] if d is not None]
            ok = f"@{min(at)}" if at else "yes"
            pair = f"{ratio(w, m, pairs[m]):.2f}x" if m in pairs else ""
            print(f"{w:<12} {m:<17} {tps:7.2f} {ratio(w, m, 'hf plain'):10.2f}x {ratio(w, m, 'specplug plain'):10.2f}x "
                  f"{mal:7.2f} {ok:>5} {pair:>6}")

    print("\nspecplug batches (the workloads repeated in turn to fill the batch; aggregate new tokens/s, best of the "
          "repeats; x: median ratio to plain within a repeat):")
    order = list(WORKLOADS)
    for bs in [int(b) for b in args.batches.split(",") if b]:
        batch = [ids[order[i % len(order)]] for i in range(bs)]
        engs = ("plain", "ngram", "ngram paced", "draft paced")
        speed: dict[str, list[float]] = {e: [] for e in engs}
        mal: dict[str, float] = {}
        diff: dict[str, list[int]] = {}
        line = f"batch {bs:>3}:"
        for rep in range(args.repeats):
            for eng in engs[:: -1 if rep % 2 else 1]:
                sync()
                t = time.perf_counter()
                res = engines[eng].generate(batch, params)
                sync()
                got = [r.tokens + ([eos] if r.finish_reason == "stop" else []) for r in res]
                speed[eng].append(sum(len(g) for g in got) / (time.perf_counter() - t))
                mal[eng] = sum(r.stats.new_tokens for r in res) / max(1, sum(r.stats.target_passes for r in res))
                wrong = [i for i, g in enumerate(got) if g != refs[order[i % len(order)]]]
                diff[eng] = sorted(set(diff.get(eng, [])) | set(wrong))
        for eng in engs:
            x = statistics.median(a / b for a, b in zip(speed[eng], speed["plain"], strict=True))
            same = diff[eng] or "yes"
            line += f"  {eng} {max(speed[eng]):7.2f} tok/s {x:.2f}x (acc.len {mal[eng]:.2f}, same {same})"
        print(line)


def _first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first token where ``a`` and ``b`` differ (one ending early counts), or None if equal."""
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


if __name__ == "__main__":
    main()
