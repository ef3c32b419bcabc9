"""Losslessness of a live configuration: greedy outputs of the speculative endpoint against the baseline.

Speculative decoding with exact verification must return the baseline's tokens at temperature 0. Real
servers still differ sometimes without being wrong: a batch of a different shape (the verify pass scores
k+1 positions at once) sums floating-point numbers in another order, and where the top two candidates are
within that noise the argmax can flip; from there the texts part ways. Such divergences come late (after
a long identical prefix) and at near-ties. A broken drafter/verifier diverges early, often and at tokens
the baseline clearly did not pick.

With a JSON schema (``specplug verify --json-schema``) every request asks for structured output
(``response_format`` json_schema), and the report says per endpoint how many outputs parse as JSON and validate
against the schema: speculation must keep the grammar's mask at every verified position, so the outputs stay
identical and valid.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import BaseModel

from specplug.bench.client import Completion, Endpoint, complete, make_client, preflight
from specplug.bench.prompts import Prompt

EXPLANATION = (
    "Greedy decoding is deterministic only up to floating-point rounding: the speculative server scores "
    "several positions per forward and batches requests differently, so sums run in another order. Where the "
    "two best tokens are nearly tied that noise can flip the choice, and the texts part ways from there. Such "
    "divergences are late (after a long identical prefix) or at near-ties and are not a bug. Early or "
    "frequent divergences at tokens the baseline clearly preferred are systematic: the speculative path is "
    "not lossless (wrong verification, sampling parameters, or a different model/tokenizer)."
)


class Divergence(BaseModel):
    prompt_id: str
    identical: bool
    unit: str  # "token" when both servers returned tokens, else "char"
    length_baseline: int
    length_speculative: int
    position: int | None = None
    kind: str = "identical"  # identical | near-tie | late | systematic | error
    margin: float | None = None  # baseline logprob lead of its token over the speculative one, when known
    baseline_text: str = ""
    speculative_text: str = ""
    context: str = ""
    error: str | None = None


class SchemaCheck(BaseModel):
    """How one endpoint's outputs fared against the schema."""

    role: str  # "speculative" or "baseline"
    outputs: int = 0  # answered (failed requests are counted in the report's errors)
    parsed: int = 0  # parse as JSON
    valid: int = 0  # and validate against the schema
    truncated: int = 0  # ended at max_tokens (finish_reason "length"): cut short, not a broken grammar
    first_problem: str | None = None  # the first invalid output that was not truncated: prompt and why

    @property
    def broken(self) -> int:
        """Outputs that ended by themselves and still do not validate: the server did not honour the schema."""
        return self.outputs - self.valid - self.truncated


class VerifyReport(BaseModel):
    endpoint: str
    baseline: str
    model: str | None = None
    prompts: int = 0
    identical: int = 0
    share_identical: float = 0.0
    near_tie: int = 0
    late: int = 0
    systematic: int = 0
    errors: int = 0
    max_tokens: int = 0
    late_after: int = 32
    tie_margin: float = 0.5
    compared_by: str = "token"
    verdict: str = ""
    explanation: str = EXPLANATION
    results: list[Divergence] = []
    json_schema: str | None = None  # the schema file, when every request asked for structured output
    schema_checks: list[SchemaCheck] = []

    @property
    def failed(self) -> bool:
        return self.systematic > 0 or self.errors > 0 or any(c.broken for c in self.schema_checks)


def load_schema(path: str) -> dict[str, Any]:
    """The JSON schema in ``path``, checked against its metaschema (a bad schema fails before any request)."""
    from specplug.errors import SpecplugError

    validators = _jsonschema()
    try:
        with open(path, encoding="utf-8") as fh:
            schema = json.load(fh)
    except OSError as exc:
        raise SpecplugError(f"Cannot read --json-schema {path}: {exc.strerror}.") from None
    except json.JSONDecodeError as exc:
        raise SpecplugError(f"--json-schema {path} is not JSON: {exc}.") from None
    if not isinstance(schema, dict):
        raise SpecplugError(f"--json-schema {path} must hold a JSON object (a JSON schema).")
    try:
        validators.validator_for(schema).check_schema(schema)
    except Exception as exc:  # jsonschema.SchemaError: the message names the offending keyword
        raise SpecplugError(f"--json-schema {path} is not a valid JSON schema: {getattr(exc, 'message', exc)}.") from None
    return schema


def _jsonschema() -> Any:
    from specplug.errors import SpecplugError

    try:
        import jsonschema.validators
    except ImportError:
        raise SpecplugError("--json-schema needs the jsonschema package.", "pip install 'specplug[bench]'.") from None
    return jsonschema.validators


def check_schema(role: str, schema: dict[str, Any], outputs: list[tuple[str, Completion]]) -> SchemaCheck:
    """Count ``outputs`` ((prompt id, completion)) that parse as JSON and validate against ``schema``."""
    validator = _jsonschema().validator_for(schema)(schema)
    check = SchemaCheck(role=role)
    for pid, c in outputs:
        if c.error:
            continue
        check.outputs += 1
        problem = None
        try:
            value = json.loads(c.text)
        except json.JSONDecodeError as exc:
            problem = f"not JSON ({exc.msg} at character {exc.pos})"
        else:
            check.parsed += 1
            error = next(iter(validator.iter_errors(value)), None)
            if error is None:
                check.valid += 1
                continue
            problem = f"does not validate: {error.message}"
        if c.finish_reason == "length":
            check.truncated += 1
        elif check.first_problem is None:
            check.first_problem = f"{pid}: {problem}"
    return check


class _WithBody:
    """An httpx client whose POSTs also carry ``extra`` body fields (the structured-output request)."""

    def __init__(self, client: Any, extra: dict[str, Any]) -> None:
        self._client = client
        self._extra = extra

    async def post(self, url: str, json: dict[str, Any] | None = None, **kw: Any) -> Any:
        return await self._client.post(url, json={**(json or {}), **self._extra}, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def response_format(schema: dict[str, Any], name: str = "verify") -> dict[str, Any]:
    """OpenAI's ``response_format`` asking for output that follows ``schema``."""
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def _first_diff(a: list[str] | str, b: list[str] | str) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _margin(base: Completion, spec: Completion, pos: int) -> float | None:
    """How much more the baseline liked its token than the speculative one, from either side's top-k."""
    if base.tokens is None or spec.tokens is None or pos >= len(base.tokens) or pos >= len(spec.tokens):
        return None
    bt, st = base.tokens[pos], spec.tokens[pos]
    for top in (base.top, spec.top):
        if top and pos < len(top) and bt in top[pos] and st in top[pos]:
            return abs(top[pos][bt] - top[pos][st])
    # The other token is outside the listed alternatives: its lead is at least the gap to the last listed one.
    if base.top and pos < len(base.top) and len(base.top[pos]) >= 2 and bt in base.top[pos]:
        return base.top[pos][bt] - min(base.top[pos].values())
    return None


def classify(pid: str, base: Completion, spec: Completion, late_after: int, tie_margin: float) -> Divergence:
    if base.error or spec.error:
        return Divergence(
            prompt_id=pid, identical=False, unit="-", length_baseline=0, length_speculative=0, kind="error",
            error=f"baseline: {base.error}" if base.error else f"speculative: {spec.error}",
        )
    by_token = base.tokens is not None and spec.tokens is not None
    a: list[str] | str = base.tokens if by_token else base.text  # type: ignore[assignment]
    b: list[str] | str = spec.tokens if by_token else spec.text  # type: ignore[assignment]
    if by_token and "".join(a) != base.text and base.text:
        by_token, a, b = False, base.text, spec.text  # tokens do not spell the text: compare what users see
    unit = "token" if by_token else "char"
    pos = _first_diff(a, b)
    d = Divergence(
        prompt_id=pid, identical=pos is None, unit=unit, length_baseline=len(a), length_speculative=len(b), position=pos
    )
    if pos is None:
        return d
    d.baseline_text = "".join(a[pos : pos + 8]) if by_token else str(a[pos : pos + 40])
    d.speculative_text = "".join(b[pos : pos + 8]) if by_token else str(b[pos : pos + 40])
    d.context = "".join(a[max(0, pos - 8) : pos]) if by_token else str(a[max(0, pos - 40) : pos])
    d.margin = _margin(base, spec, pos) if by_token else None
    late = pos >= (late_after if by_token else late_after * 4)  # ~4 characters per token
    if d.margin is not None and d.margin <= tie_margin:
        d.kind = "near-tie"
    elif late and (d.margin is None or d.margin <= 4 * tie_margin):
        d.kind = "late"
    else:
        d.kind = "systematic"
    return d


async def _run(
    base_ep: Endpoint, spec_ep: Endpoint, prompts: list[Prompt], api: str, max_tokens: int, concurrency: int,
    timeout_s: float, extra: dict[str, Any] | None = None,
) -> list[tuple[Completion, Completion]]:
    bc = make_client(base_ep, concurrency, timeout_s)
    sc = make_client(spec_ep, concurrency, timeout_s)
    try:
        base_ep.model = await preflight(bc, base_ep, "--baseline")
        spec_ep.model = await preflight(sc, spec_ep, "--endpoint")
        sem = asyncio.Semaphore(concurrency)
        bpost, spost = (_WithBody(bc, extra), _WithBody(sc, extra)) if extra else (bc, sc)

        async def one(p: Prompt) -> tuple[Completion, Completion]:
            async with sem:
                b = await complete(bpost, base_ep, p, p.api(api), max_tokens)  # type: ignore[arg-type]
                s = await complete(spost, spec_ep, p, p.api(api), max_tokens)  # type: ignore[arg-type]
                return b, s

        return list(await asyncio.gather(*(one(p) for p in prompts)))
    finally:
        await bc.aclose()
        await sc.aclose()


def verify(
    spec_ep: Endpoint, base_ep: Endpoint, prompts: list[Prompt], *, api: str = "auto", max_tokens: int = 128,
    concurrency: int = 1, late_after: int = 32, tie_margin: float = 0.5, max_diff_share: float = 0.5,
    timeout_s: float = 300.0, json_schema: dict[str, Any] | None = None, schema_name: str | None = None,
) -> VerifyReport:
    """Send every prompt greedily to both servers and classify each difference; with ``json_schema`` every request
    asks for output following it, and each endpoint's outputs are validated against it."""
    extra = {"response_format": response_format(json_schema)} if json_schema is not None else None
    pairs = asyncio.run(_run(base_ep, spec_ep, prompts, api, max_tokens, concurrency, timeout_s, extra))
    results = [classify(p.id, b, s, late_after, tie_margin) for p, (b, s) in zip(prompts, pairs, strict=True)]
    rep = VerifyReport(
        endpoint=spec_ep.root, baseline=base_ep.root, model=spec_ep.model, prompts=len(results), max_tokens=max_tokens,
        late_after=late_after, tie_margin=tie_margin, results=results,
    )
    if json_schema is not None:
        rep.json_schema = schema_name or "(given)"
        rep.schema_checks = [
            check_schema(role, json_schema, [(p.id, pair[i]) for p, pair in zip(prompts, pairs, strict=True)])
            for i, role in ((1, "speculative"), (0, "baseline"))
        ]
    rep.identical = sum(r.identical for r in results)
    rep.near_tie = sum(r.kind == "near-tie" for r in results)
    rep.late = sum(r.kind == "late" for r in results)
    rep.errors = sum(r.kind == "error" for r in results)
    compared = [r for r in results if r.kind != "error"]
    rep.share_identical = rep.identical / len(compared) if compared else 0.0
    units = {r.unit for r in compared}
    rep.compared_by = "token" if units == {"token"} else ("text" if units == {"char"} else "token and text")
    differing = [r for r in compared if not r.identical]
    if compared and len(differing) / len(compared) > max_diff_share:
        # Noise flips a rare near-tie; most outputs diverging is a pattern, whatever each position looks like.
        for r in differing:
            r.kind = "systematic"
        rep.near_tie = rep.late = 0
    rep.systematic = sum(r.kind == "systematic" for r in results)
    if rep.errors:
        rep.verdict = f"{rep.errors} request(s) failed; the comparison is incomplete."
    elif rep.systematic:
        rep.verdict = f"NOT lossless: {rep.systematic} systematic difference(s) of {len(compared)}."
    elif differing:
        rep.verdict = f"Lossless up to numeric noise: {len(differing)} late/near-tie divergence(s), none systematic."
    else:
        rep.verdict = "Lossless: every output identical."
    broken = [c for c in rep.schema_checks if c.broken]
    if broken:
        rep.verdict += " Structured output NOT honoured: " + "; ".join(
            f"{c.role} returned {c.broken} output(s) that do not validate" for c in broken) + "."
    elif rep.schema_checks and any(c.truncated for c in rep.schema_checks):
        rep.verdict += " Some outputs hit max_tokens before the JSON was complete; raise --max-tokens to check them."
    return rep
