"""Distil the packaged drafter from SmolLM2-135M-Instruct; writes the weights specplug ships.

The drafter (``smollm2-135m-draft``) keeps the target's embeddings, final norm and tied LM head and has 4
decoder layers (``--layers``: initialised from the target's layers 0, 1, 2 and 29), trained here to match the
target's next-token distribution (KL to the target's softmax at every position). Training text is the target's
own answers (specplug's engine; 3 of 4 batches greedy, 1 sampled at temperature 0.7) to prompts built from
this Python's standard library: its functions (explain, document, rewrite, test) and module docstrings
(summarise, answer from context), and general questions listed below. None is a prompt of
``benchmarks/embedded.py`` or of specplug's bench workloads, which measure the result.

Output: ``specplug/runtime/data/smollm2-135m-draft.safetensors``, the trained layers in int8 (per output row,
with float scales), the norms in float32 and the draft vocabulary (``--vocab``: the 8192 token ids the
target's text uses most, see ``rank_vocab``), which ``specplug.runtime.smollm2.ensure_draft`` puts on top of
the target's weights. Stages cache their results under ``--work``:

    python scripts/distill_drafter.py generate              # 800 sequences, 268k tokens: 11.5 min on 2 cores
    python scripts/distill_drafter.py train                 # 520 steps: 30 min on 2 cores (bfloat16, AMX)
    python scripts/distill_drafter.py eval                  # greedy agreement on the 32 held-out sequences
    python scripts/distill_drafter.py vocab                 # only (re)writes the draft vocabulary (seconds)

The draft vocabulary's size was measured in decoding (``benchmarks/embedded.py``'s workloads, k = 4): 4096 and
8192 tokens left every workload's acceptance length as with all 49152, and with 8192 fixed-k drafting ran
1.07-1.13x faster (rag-summary 1.00 in one of two runs); 8192 keeps more of the rare tokens. The shipped file
is what those commands gave (Xeon with AMX, 2 cores, torch 2.13). Greedy top-1 agreement with the target,
teacher-forced on the held-out sequences: 0.00 for the untrained layers; after training 0.53 on the prompts
and 0.43 on the answers (on training sequences 0.58 and 0.56, so more text would help). 8 of the 32 held-out
prompts also occur in training: the chat questions and docstrings come from small pools. The prompts of the
tests and benchmarks that measure the drafter occur in neither. In decoding
(``tests/runtime/test_smollm2.py``, k = 3) its first draft is accepted on 0.34 of the steps of a code answer
and 0.13-0.24 of a chat answer, against 0.05-0.13 for the untrained 14-layer cut it replaced, at 4/14 of that
cut's layers.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import random
import sys
import sysconfig
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specplug.fileio import write_atomic, write_atomic_bytes  # noqa: E402 - after the path setup
from specplug.runtime import smollm2  # noqa: E402 - stdlib imports only; torch comes with the stages

CODE_TASKS = [
    "Explain what this Python function does.",
    "Add type hints and a docstring to this function.",
    "Rewrite this function to make it shorter and clearer.",
    "Write a unit test for this function with pytest.",
    "Rename the variables in this function to be more descriptive and return the full function.",
    "Is there a bug in this function? Explain and show the corrected code.",
    "Convert this function to use a loop instead of a comprehension where possible, and show the result.",
]
TEXT_TASKS = [
    "Summarize the following text in a few sentences.\n\n{text}",
    "What are the key points of this passage?\n\n{text}",
    "Using only the context below, explain what the module is for.\n\nContext:\n{text}",
    "Rewrite this documentation in plain language for a beginner.\n\n{text}",
]
QUESTIONS = [
    "What is the difference between a list and a tuple in Python?", "How does a hash table work?",
    "Give me three tips for staying focused while studying.", "Write a short poem about the sea.",
    "Explain photosynthesis to a ten-year-old.", "What causes the seasons on Earth?",
    "How do I make a simple tomato sauce?", "What is recursion? Give an example.",
    "Write a polite email asking for a meeting next week.", "What are the benefits of regular exercise?",
    "Explain how HTTPS keeps data safe.", "What is the capital of Australia, and why is it not Sydney?",
    "Describe the water cycle.", "How do vaccines work?", "Write a haiku about autumn leaves.",
    "What is a binary search and when is it useful?", "How can I improve my public speaking?",
    "Explain the difference between weather and climate.", "What is machine learning?",
    "Give me a plan for learning to run 5 kilometres.", "Write a short story about a lost robot.",
    "What is the Pythagorean theorem?", "How do I write a good cover letter?",
    "Explain what an API is.", "What are prime numbers? List the first ten.",
    "How does a refrigerator keep food cold?", "Suggest five names for a bakery.",
    "What is the difference between RAM and storage?", "How do plants know which way is up?",
    "Explain supply and demand.", "Write a limerick about a cat.", "What is Git used for?",
    "How do I center a div in CSS?", "Explain the difference between TCP and UDP.",
    "What should I pack for a weekend hiking trip?", "Why is the sky blue?",
    "Summarize the plot of a classic fairy tale of your choice.", "What is a SQL join?",
    "Give me a healthy breakfast idea.", "How does compound interest work?",
    "What is the role of the mitochondria?", "Explain object-oriented programming.",
    "Write a thank-you note to a teacher.", "What are black holes?", "How do I reverse a string in Python?",
    "What is the difference between a virus and a bacterium?", "Explain what a neural network is.",
    "Give me tips for a job interview.", "How do I sort a dictionary by value in Python?",
    "What is the greenhouse effect?", "Explain Big O notation.", "How do magnets work?",
    "Write a product description for a reusable water bottle.", "What is a regular expression?",
    "How can I sleep better?", "Explain the rules of chess briefly.", "What is inflation?",
    "How do I read a CSV file in Python?", "What are the planets of the solar system?",
    "Write a motivational message for a friend starting a new job.", "What is a linked list?",
    "Explain how a bill becomes a law in general terms.", "What is the difference between a process and a thread?",
    "How do I make my code easier to test?", "Describe a good morning routine.",
    "What is JSON?", "Explain the concept of gravity.", "How do I handle exceptions in Python?",
    "Give me ideas for a rainy day.", "What does a compiler do?", "How do bees make honey?",
]
TOPICS = [
    "volcanoes", "the Roman Empire", "electric cars", "coffee", "the internet", "sleep", "the moon",
    "friendship", "recycling", "music theory", "databases", "the human heart", "rainforests", "time zones",
    "encryption", "bread baking", "earthquakes", "solar panels", "memory in computers", "the ocean tides",
]
TOPIC_TASKS = [
    "Explain {t} in simple terms.", "Write a short paragraph about {t}.", "Give me five facts about {t}.",
    "What are common misconceptions about {t}?",
]


def stdlib_sources() -> list[Path]:
    lib = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in lib.glob("*.py") if not p.name.startswith("_"))


def build_prompts(n: int, seed: int) -> list[str]:
    """``n`` user messages: code tasks over stdlib functions, text tasks over docstrings, and questions."""
    rng = random.Random(seed)
    funcs: list[str] = []
    docs: list[str] = []
    for path in stdlib_sources():
        try:
            src = path.read_text(encoding="utf-8")
            tree = ast.parse(src)
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        doc = ast.get_docstring(tree)
        if doc and 300 <= len(doc) <= 2500:
            docs.append(doc)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.end_lineno and 6 <= node.end_lineno - node.lineno <= 28:
                funcs.append(ast.get_source_segment(src, node) or "")
    funcs = [f for f in funcs if f]
    rng.shuffle(funcs)
    rng.shuffle(docs)
    chat = QUESTIONS + [t.format(t=topic) for t in TOPIC_TASKS for topic in TOPICS]
    rng.shuffle(chat)
    prompts: list[str] = []
    # Half code, a quarter text, a quarter chat: the shares of specplug's workloads.
    for i in range(n // 2):
        prompts.append(f"{rng.choice(CODE_TASKS)}\n\n```python\n{funcs[i % len(funcs)]}\n```")
    for i in range(n // 4):
        prompts.append(rng.choice(TEXT_TASKS).format(text=docs[i % len(docs)]))
    while len(prompts) < n:
        prompts.append(chat[len(prompts) % len(chat)])
    rng.shuffle(prompts)
    return prompts


def generate(args: argparse.Namespace) -> None:
    import torch

    from specplug.runtime.engine import GenerationParams
    from specplug.runtime.models import build_engine
    from specplug.runtime.sampling import SamplingParams

    torch.manual_seed(0)
    # bfloat16: on a CPU with AMX it generates ~4x faster than float32; the text only has to be the target's.
    engine = build_engine(smollm2.TARGET_NAME, method="ngram", device="cpu", dtype="bfloat16")
    tok = engine.tokenizer
    prompts = build_prompts(args.prompts + args.held_out, seed=0)
    texts = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
             for p in prompts]
    ids = [tok(t, add_special_tokens=False).input_ids[-args.max_prompt:] for t in texts]
    out: list[list[int]] = []
    prompt_lengths: list[int] = []
    start = time.perf_counter()
    for lo in range(0, len(ids), args.batch):
        chunk = ids[lo : lo + args.batch]
        # Every fourth batch sampled, so the drafter also sees the target's less likely continuations.
        temp = 0.7 if (lo // args.batch) % 4 == 3 else 0.0
        params = GenerationParams(max_new_tokens=args.max_tokens, sampling=SamplingParams(temperature=temp, seed=lo))
        for prompt, res in zip(chunk, engine.generate(chunk, params), strict=True):
            out.append(prompt + res.tokens)
            prompt_lengths.append(len(prompt))
        done = lo + len(chunk)
        print(f"{done}/{len(ids)} sequences, {time.perf_counter() - start:.0f} s", flush=True)
    data = {"held_out": args.held_out, "sequences": out, "prompt_lengths": prompt_lengths}
    write_atomic(Path(args.work) / "sequences.json", json.dumps(data))


def schedule(step: int, frac: float) -> float:
    """Learning-rate factor: 20 steps of linear warm-up, then cosine down to 0.1 as ``frac`` (the share of
    --minutes used) goes to 1. With --steps the run may end before that."""
    return min(1.0, (step + 1) / 20) * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, frac))))


def rows_of(seqs: list[list[int]], seq: int) -> list[list[int]]:
    """The sequences packed into rows of ``seq`` tokens (a row may span two sequences: attention crosses the
    seam, which costs a few tokens of signal and saves the padding)."""
    flat = [t for s in seqs for t in s]
    return [flat[i : i + seq] for i in range(0, len(flat) - seq + 1, seq)]


def load_sequences(work: str) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """Training sequences, held-out sequences and the held-out prompts' lengths, from the generate stage."""
    path = Path(work) / "sequences.json"
    if not path.is_file():
        sys.exit(f"{path} is missing: run `python scripts/distill_drafter.py generate` first (same --work).")
    data = json.loads(path.read_text())
    cut = len(data["sequences"]) - data["held_out"]
    return data["sequences"][:cut], data["sequences"][cut:], data["prompt_lengths"][cut:]


def train(args: argparse.Namespace) -> None:
    import torch
    import torch.nn.functional as F

    from specplug.runtime.models import load_model
    from specplug.runtime.tiny import layer_subset

    torch.manual_seed(0)
    target, _ = load_model(smollm2.TARGET_NAME, torch.device("cpu"), torch.float32)
    target.requires_grad_(False)
    layers = tuple(int(x) for x in args.layers.split(","))
    draft = layer_subset(target, layers).train()
    draft.model.embed_tokens.weight.requires_grad_(False)  # with the tied head: the target's, kept as they are
    trained = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=args.lr, weight_decay=0.0)
    rows = rows_of(load_sequences(args.work)[0], args.seq)
    print(f"{len(rows)} rows of {args.seq} tokens", flush=True)
    rng = random.Random(0)
    start = time.perf_counter()
    total_steps = args.steps or 10**9
    step = 0
    while time.perf_counter() - start < args.minutes * 60 and step < total_steps:
        batch = torch.tensor(rng.sample(rows, args.train_batch))
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            teacher = target(batch).logits.float()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            student = draft(batch).logits.float()
        logp_t = F.log_softmax(teacher, -1)
        # Per-token KL(target || drafter): batchmean divides by the rows, so divide by their length too.
        loss = F.kl_div(F.log_softmax(student, -1), logp_t, log_target=True, reduction="batchmean") / args.seq
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        elapsed = time.perf_counter() - start
        for g in opt.param_groups:
            g["lr"] = args.lr * schedule(step, elapsed / (args.minutes * 60))
        opt.step()
        if step % args.log_every == 0:
            agree = (student.argmax(-1) == teacher.argmax(-1)).float().mean().item()
            print(f"step {step} loss {loss.item():.3f} top1 agreement {agree:.3f} ({elapsed:.0f} s)", flush=True)
        step += 1
    save(draft, layers, Path(args.out), vocab_tensor(args))
    print(f"wrote {args.out}")


def agreement(draft, target, seqs: list[list[int]], prompt_lengths: list[int],  # noqa: ANN001
              vocab: list[int] | None = None) -> tuple[float, float]:
    """Share of prompt and of answer positions where the drafter's greedy next token (from ``vocab`` when
    given) is the target's (teacher-forced, float32)."""
    import torch

    same = [0, 0]
    total = [0, 0]
    ids = None if vocab is None else torch.tensor(vocab)
    with torch.no_grad():
        for seq, n in zip(seqs, prompt_lengths, strict=True):
            batch = torch.tensor([seq])
            logits = draft(batch).logits
            guess = logits.argmax(-1) if ids is None else ids[logits[..., ids].argmax(-1)]
            hit = (guess == target(batch).logits.argmax(-1))[0, :-1]
            for part, sl in enumerate((slice(0, n - 1), slice(n - 1, None))):
                same[part] += int(hit[sl].sum())
                total[part] += hit[sl].numel()
    return same[0] / total[0], same[1] / max(total[1], 1)


def evaluate(args: argparse.Namespace) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from specplug.runtime.models import draft_vocab, load_model
    from specplug.runtime.tiny import layer_subset

    target, _ = load_model(smollm2.TARGET_NAME, torch.device("cpu"), torch.float32)
    _, seqs, lengths = load_sequences(args.work)
    layers = tuple(int(x) for x in args.layers.split(","))
    folder = smollm2.ensure_draft(Path(args.out))
    trained = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    vocab = draft_vocab(str(folder))
    print(f"top-1 agreement on {len(seqs)} held-out sequences (prompts, answers):")
    runs = [(f"untrained layers {args.layers}", layer_subset(target, layers), None), (args.out, trained, None)]
    if vocab is not None:
        runs.append((f"{args.out}, its {len(vocab)}-token draft vocabulary", trained, vocab))
    for name, draft, ids in runs:
        on_prompts, on_answers = agreement(draft.eval(), target, seqs, lengths, ids)
        print(f"  {name}: {on_prompts:.3f}, {on_answers:.3f}")


def rank_vocab(seqs: list[list[int]], size: int, vocab_size: int) -> list[int]:
    """The drafter's vocabulary: the ``size`` token ids the target's text uses most. First the ids by their count
    in ``seqs`` (the target's own prompts and answers), then the rest by id: a byte-level BPE numbers its tokens
    in the order it merged them, so a lower id was a more frequent pair in the tokenizer's broad training text,
    which covers the words a 268k-token corpus never met."""
    counts: dict[int, int] = {}
    for seq in seqs:
        for t in seq:
            counts[t] = counts.get(t, 0) + 1
    ranked = sorted(counts, key=lambda t: (-counts[t], t))[:size]
    seen = set(ranked)
    ranked += [t for t in range(vocab_size) if t not in seen][: size - len(ranked)]
    return ranked


def vocab(args: argparse.Namespace) -> None:
    """Put the drafter's vocabulary (``--vocab`` ids; 0: none, the whole vocabulary) into ``--out``, whose
    other tensors stay as they are."""
    from safetensors import safe_open
    from safetensors.torch import save

    out = Path(args.out)
    with safe_open(str(out), framework="pt") as f:
        tensors = {name: f.get_tensor(name) for name in f.keys() if name != smollm2.VOCAB_TENSOR}  # noqa: SIM118
        meta = f.metadata() or {}
    tensors.update(vocab_tensor(args))
    write_atomic_bytes(out, save(tensors, metadata=meta))
    print(f"wrote {out} with a draft vocabulary of {args.vocab or 'all'} tokens")


def vocab_tensor(args: argparse.Namespace) -> dict:
    """``{VOCAB_TENSOR: ids}`` for ``--vocab`` ids ranked from the training sequences, or {} for --vocab 0."""
    import torch
    from transformers import AutoConfig

    if not args.vocab:
        return {}
    seqs, _, _ = load_sequences(args.work)
    size = AutoConfig.from_pretrained(str(smollm2.ensure_target())).vocab_size
    ids = rank_vocab(seqs, min(args.vocab, size), size)
    return {smollm2.VOCAB_TENSOR: torch.tensor(ids, dtype=torch.int32)}


def save(draft, layers: tuple[int, ...], out: Path, extra: dict) -> None:  # noqa: ANN001
    """The trained layers in int8 per output row (float32 scales), the norms in float32 and ``extra``
    (the draft vocabulary), atomically."""
    import torch
    from safetensors.torch import save

    tensors: dict[str, torch.Tensor] = dict(extra)
    for name, p in draft.state_dict().items():
        if not (name.startswith("model.layers.") or name == "model.norm.weight"):
            continue
        w = p.detach().float()
        if w.dim() == 2:
            scale = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
            tensors[name] = torch.round(w / scale[:, None]).to(torch.int8).contiguous()
            tensors[name + ".scale"] = scale.contiguous()
        else:
            tensors[name] = w.contiguous()
    meta = {"source_layers": ",".join(map(str, layers)), "format": "int8-rows"}
    write_atomic_bytes(out, save(tensors, metadata=meta))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=["generate", "train", "eval", "vocab"])
    ap.add_argument("--work", default=str(smollm2.cache_dir() / "distill"))
    ap.add_argument("--prompts", type=int, default=768)
    ap.add_argument("--held-out", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--max-prompt", type=int, default=512)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--train-batch", type=int, default=8)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--layers", default="0,1,2,29")
    ap.add_argument("--seq", type=int, default=384)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--minutes", type=float, default=45)
    ap.add_argument("--steps", type=int, default=520, help="0: train until --minutes")
    ap.add_argument("--out", default=str(smollm2.DRAFT_WEIGHTS))
    ap.add_argument("--vocab", type=int, default=8192, help="ids in the draft vocabulary; 0: all")
    args = ap.parse_args()
    {"generate": generate, "train": train, "eval": evaluate, "vocab": vocab}[args.stage](args)


if __name__ == "__main__":
    main()
