"""``trace compare``: base, each adapter, the task-level router and the token-routed MoE on one target.

Every model runs ``trace_train.evaluate.evaluate`` on the same seeds of the same split, so the results are
paired: each method is tested against the base with the exact McNemar test on success and a paired bootstrap
on mean reward (``trace_train.stats.compare_paired``). Outputs in ``--out``: one trajectories JSONL per model,
``compare.json``, ``compare.md``, ``compare.html`` and ``gate_choices.png`` (which slot the MoE's gates chose
for the tokens of tool calls and of replies, on the target and on each capability env).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from trace_train.compose.artefact import AdapterSpec, load_composition
from trace_train.compose.baselines import (
    MoEPolicy,
    SlotPolicy,
    TaskRouterPolicy,
    arrow_policy,
    uniform_merged_policy,
    xlora_policy,
)
from trace_train.compose.config import CompareArgs
from trace_train.config import EvalSettings, settings_of
from trace_train.evaluate import EvalResult, evaluate
from trace_train.stats import compare_paired

BASELINES = ("base", "router", "moe", "uniform", "arrow", "xlora")


def expand_models(models: list[str], adapter_names: list[str]) -> list[str]:
    """``adapters`` expands to every adapter's name; unknown names are a clear error."""
    out: list[str] = []
    for m in models:
        out += adapter_names if m == "adapters" else [m]
    unknown = [m for m in out if m not in BASELINES and m not in adapter_names]
    if unknown:
        raise ValueError(
            f"unknown model(s) {unknown}: choose from {list(BASELINES)}, 'adapters' or {adapter_names}"
        )
    if "base" not in out:
        out.insert(0, "base")  # every method is tested against the base
    return list(dict.fromkeys(out))


def paired(base: list[dict[str, Any]], other: list[dict[str, Any]]) -> dict[str, Any]:
    """``other`` against the base on the same seeds (exact McNemar on success, paired bootstrap on reward)."""
    return compare_paired(base, other).to_json()


def make_policy(name: str, comp, tokenizer, manifest: dict[str, Any], args: CompareArgs):
    """Model ``name`` of the comparison, rendering and generating as ``args`` says (engine, tool format), the
    same for every model so that the comparison is paired on the same prompts."""
    return _build_policy(name, comp, tokenizer, manifest, args).configure(
        engine=args.engine, tool_format=args.tool_format
    )


def _build_policy(name: str, comp, tokenizer, manifest: dict[str, Any], args: CompareArgs):
    from trace_train.models import load_model

    specs = comp.adapters
    if name == "base":
        return SlotPolicy(comp, tokenizer, 0)
    if name in comp.names:
        return SlotPolicy(comp, tokenizer, comp.names.index(name) + 1)
    if name == "moe":
        return MoEPolicy(comp, tokenizer)
    if name == "router":
        return TaskRouterPolicy(comp, tokenizer, specs)
    base, _ = load_model(
        args.model or manifest["base"]["model"], dtype=args.dtype or manifest["base"]["dtype"], device="cpu"
    )
    builder = {"uniform": uniform_merged_policy, "arrow": arrow_policy, "xlora": xlora_policy}[name]
    return builder(base, tokenizer, [AdapterSpec(**{**s.__dict__}) for s in specs])


def moe_policy(artefact: str, dtype: str | None = None, record_choices: bool = False) -> MoEPolicy:
    """The token-routed composed model of a ``trace compose`` artefact, as a policy."""
    comp, tokenizer, _ = load_composition(artefact, dtype=dtype)
    comp.model.eval()
    return MoEPolicy(comp, tokenizer, record_choices=record_choices)


def router_policy(model: str, adapters: dict[str, str], dtype: str | None = None) -> TaskRouterPolicy:
    """The task-level zero-shot router over ``{capability: adapter dir}`` on base ``model`` (no gates needed).

    Descriptions come from the env cards when the adapters' run dirs name their env (``config.json``'s
    ``env_id``), else the capability name is the description.
    """
    from trace_train.compose.artefact import adapter_dir, build_composition
    from trace_train.compose.train import _env_description
    from trace_train.models import load_model, resolve_model

    specs = []
    for name, path in adapters.items():
        env_id = _run_env_id(path)
        capability, description = _env_description(env_id) if env_id else (None, None)
        specs.append(AdapterSpec(name, str(adapter_dir(path)), env_id, capability or name, description))
    base, tokenizer = load_model(model, dtype=dtype or "float32", device="cpu")
    comp = build_composition(base, specs, base_path=str(resolve_model(model)))
    comp.model.eval()
    return TaskRouterPolicy(comp, tokenizer, specs)


def _run_env_id(path: str) -> str | None:
    for cfg in (Path(path) / "config.json", Path(path).parent / "config.json"):
        try:
            return json.loads(cfg.read_text()).get("env_id")
        except (OSError, json.JSONDecodeError, AttributeError):
            continue
    return None


def router_routes(router: TaskRouterPolicy, trajectories: list[dict[str, Any]]) -> dict[int, str]:
    """The slot the task-level router chooses for each task of ``trajectories`` (seed -> slot name): the first
    prompt (the conversation before the first assistant turn, the env's alone, so any policy's episode of the
    task serves) classified as the router does when it plays, one forward pass each."""
    names = router.composition.slot_names
    routes = {}
    for t in trajectories:
        messages = t["messages"]
        first = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
        routes[t["seed"]] = names[router.slot_for(router.prompt_ids(messages[:first], t["tools"]))]
    return routes


def router_reuse(
    router: TaskRouterPolicy, played: dict[str, list[dict[str, Any]]]
) -> tuple[dict[int, str], list[dict[str, Any]]]:
    """The router's slot per task, and the episodes it needs not play: on a task it gives slot ``s``, the episode of
    row ``s`` of ``played`` (slot name -> episodes, ``base`` for slot 0; every row from the same composition on
    the same tasks). The router serves a task with exactly that slot's model, so playing it again would cost as
    long and differ only by the numerics of another batch. Routes are read from ``played["base"]``."""
    routes = router_routes(router, played["base"])
    by_slot = {name: {t["seed"]: t for t in trajs} for name, trajs in played.items()}
    reuse = [by_slot[slot][seed] for seed, slot in routes.items() if seed in by_slot.get(slot, {})]
    return routes, reuse


def compare(args: CompareArgs) -> dict[str, Any]:
    comp, tokenizer, manifest = load_composition(args.composition, model=args.model, dtype=args.dtype)
    comp.model.eval()
    models = expand_models(list(args.models), comp.names)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, EvalResult] = {}
    notes: dict[str, str] = {}
    extra: dict[str, Any] = {}
    # the router last: its tasks go to slots whose own rows, played before it, are its episodes there
    for name in sorted(models, key=lambda m: m == "router"):
        try:
            policy = make_policy(name, comp, tokenizer, manifest, args)
            reuse: list[dict[str, Any]] = []
            if isinstance(policy, TaskRouterPolicy) and "base" in results:
                slots = {n: results[n].trajectories for n in ("base", *comp.names) if n in results}
                routes, reuse = router_reuse(policy, slots)
                extra["router_routes"] = {str(seed): slot for seed, slot in routes.items()}
                extra["router_reused_episodes"] = len(reuse)
            result = evaluate(
                policy,
                args.target,
                EvalSettings(**settings_of(args, EvalSettings)),
                split=args.split,
                difficulty=args.difficulty,
                out_jsonl=out / f"{name}.jsonl",
                reuse=reuse,
            )
        except Exception as e:  # noqa: BLE001 - peft's mixtures may not run here: report why, go on
            if name in ("base", "moe") or name in comp.names:
                raise
            notes[name] = f"did not run: {type(e).__name__}: {e}"[:400]
            continue
        results[name] = result
        if isinstance(policy, TaskRouterPolicy):
            extra["router_episode_slots"] = dict(policy.episode_slots)
        if name == "xlora":
            notes[name] = "X-LoRA classifier untrained (as initialised by peft)"
    rows = []
    for name in (m for m in models if m in results):  # the order asked for
        r = results[name]
        row = {"model": name, **r.summary()}
        if name != "base":
            row["vs_base"] = paired(results["base"].trajectories, r.trajectories)
        rows.append(row)
    report: dict[str, Any] = {
        "target": args.target,
        "split": args.split,
        "episodes": args.episodes,
        "composition": str(args.composition),
        "slots": comp.slot_names,
        "rows": rows,
        "notes": notes,
        **extra,
    }
    if "moe" in results and args.gate_chart and args.capability_episodes:
        report.update(gate_choices(comp, tokenizer, args, out))
    (out / "compare.json").write_text(json.dumps(report, indent=2, default=str))
    (out / "compare.md").write_text(markdown_table(report))
    (out / "compare.html").write_text(html_table(report))
    return report


def gate_choices(comp, tokenizer, args: CompareArgs, out: Path) -> dict[str, Any]:
    """Which slot the MoE's gates chose, per env (the target and each capability env) and turn type.

    A separate recording run (``capability_episodes`` episodes per env, same split) so the table's MoE row
    keeps the default engine; see :class:`MoEPolicy`.
    """
    policy = MoEPolicy(comp, tokenizer, record_choices=True).configure(
        engine=args.engine, tool_format=args.tool_format
    )
    envs = [("target", args.target)] + [(s.name, s.env_id) for s in comp.adapters if s.env_id]
    for context, env_id in envs:
        policy.context = context
        evaluate(
            policy,
            env_id,
            EvalSettings(**{**settings_of(args, EvalSettings), "episodes": args.capability_episodes}),
            split=args.split,
        )
    choices = [
        {"env": env, "turn": kind, "slot": slot, "count": n}
        for (env, kind, slot), n in sorted(policy.choices.items())
    ]
    chart = gate_chart(choices, comp.slot_names, out / "gate_choices.png") if choices else None
    return {"gate_choices": choices, "gate_chart": str(chart) if chart else None}


def _cells(row: dict[str, Any]) -> list[str]:
    lo, hi = row["success_ci"]
    rlo, rhi = row["reward_ci"]
    cells = [
        row["model"],
        f"{row['success_rate']:.3f} [{lo:.3f}, {hi:.3f}]",
        f"{row['reward_mean']:.3f} [{rlo:.3f}, {rhi:.3f}]",
    ]
    v = row.get("vs_base")
    if v is None:
        return [*cells, "-", "-", "-"]
    dlo, dhi = v["reward_diff_ci"]
    return [
        *cells,
        f"{v['success_b'] - v['success_a']:+.3f} (+{v['only_b']} / -{v['only_a']})",
        f"{v['mcnemar_p']:.3g}",
        f"{v['reward_diff']:+.3f} [{dlo:+.3f}, {dhi:+.3f}]",
    ]


HEADER = [
    "model",
    "success [95% Wilson CI]",
    "mean reward [95% CI]",
    "success vs base (solved only by it / only by base)",
    "exact McNemar p",
    "reward vs base [95% paired bootstrap CI]",
]


def markdown_table(report: dict[str, Any]) -> str:
    lines = [
        f"# trace compare: {report['target']} ({report['split']} split, {report['episodes']} paired episodes)",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    lines += ["| " + " | ".join(_cells(r)) + " |" for r in report["rows"]]
    for name, note in report.get("notes", {}).items():
        lines.append(f"\n- {name}: {note}")
    if report.get("router_episode_slots"):
        lines.append(f"\n- task-level router's choices (episodes): {report['router_episode_slots']}")
    if report.get("gate_chart"):
        lines.append(f"\n![gate choices]({Path(report['gate_chart']).name})")
    return "\n".join(lines) + "\n"


def html_table(report: dict[str, Any]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADER)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in _cells(r)) + "</tr>" for r in report["rows"]
    )
    notes = "".join(
        f"<li>{html.escape(k)}: {html.escape(v)}</li>" for k, v in report.get("notes", {}).items()
    )
    img = (
        f'<img src="{Path(report["gate_chart"]).name}" alt="gate choices">'
        if report.get("gate_chart")
        else ""
    )
    title = html.escape(
        f"trace compare: {report['target']} ({report['split']}, {report['episodes']} paired episodes)"
    )
    return (
        f"<!doctype html><meta charset='utf-8'><title>{title}</title><h1>{title}</h1>"
        f"<table border='1' cellpadding='4'><tr>{head}</tr>{body}</table><ul>{notes}</ul>{img}\n"
    )


def gate_chart(choices: list[dict[str, Any]], slots: list[str], path: Path) -> Path:
    """Stacked bars: share of (token, layer) routing decisions per slot, per env and turn type."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(c["env"], c["turn"]) for c in choices})
    totals = {g: sum(c["count"] for c in choices if (c["env"], c["turn"]) == g) for g in groups}
    fig, ax = plt.subplots(figsize=(max(5, 1.3 * len(groups)), 4))
    bottom = [0.0] * len(groups)
    for slot in slots:
        share = [
            sum(c["count"] for c in choices if (c["env"], c["turn"]) == g and c["slot"] == slot)
            / max(totals[g], 1)
            for g in groups
        ]
        ax.bar(range(len(groups)), share, bottom=bottom, label=slot)
        bottom = [b + s for b, s in zip(bottom, share, strict=True)]
    ax.set_xticks(range(len(groups)), [f"{e}\n{t}" for e, t in groups], fontsize=8)
    ax.set_ylabel("share of routing decisions (tokens x layers)")
    ax.set_title("Which expert the gates chose")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
