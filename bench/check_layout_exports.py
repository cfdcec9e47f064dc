#!/usr/bin/env python3
"""Check that `rematlab-cli layout --json` exports are accepted by the tools themselves.

For a few llama2-70b layouts on 64 A100s, each export meets the tool's own code:
  deepspeed   keys vs its config constants; DeepSpeedZeroConfig; DeepSpeedConfig and its batch assertion
              with world size dp = gpus/(tp*pp*cp); read-back. Then its ZeRO memory estimators.
  torchtitan  keys vs its config dataclasses, then its parser: 0.2.x reads the TOML (--job.config_file);
              0.3+ reads no TOML, so the keys go in as its --section.key options; read-back.
  megatron    each --flag vs Megatron-LM's arguments.py (add_argument flags, and those ArgumentGroupFactory
              makes from dataclasses when arguments.py sits in its source tree); values vs choices.
Peers live outside the checkout; the project's python and its pinned torch 2.11 stay the ones used:
  D=~/.cache/rematlab/peers; PY=.venv/bin/python
  $PY -m pip install --target $D --no-deps deepspeed hjson ninja py-cpuinfo msgpack einops pydantic \\
      pydantic-core typing-inspection annotated-types psutil packaging numpy tqdm
  $PY -m pip install --target $D --no-deps 'torchtitan==0.2.2' tyro docstring-parser typeguard rich shtab \\
      typing-extensions markdown-it-py mdurl pygments tomli tokenizers spmd_types==0.2.3 torch_checkpointing \\
      safetensors torchdata
  rm -rf $D/torch $D/torch-* $D/nvidia* $D/triton*      # a torch copy pip pulled in, if any
The TOML export is torchtitan 0.2's job file (the last series that reads one); with 0.3 installed
the script checks the same keys as 0.3's --section.key options and names what 0.3 calls otherwise.
--peers is a path list (DIR:DIR…), searched in order.
Megatron-LM is not installed: clone it outside this repo and name its arguments.py:
  git clone --depth 1 https://github.com/NVIDIA/Megatron-LM /tmp/Megatron-LM
  $PY bench/check_layout_exports.py --megatron-arguments /tmp/Megatron-LM/megatron/training/arguments.py
"""
import argparse, ast, contextlib, dataclasses, difflib, functools, io, json, os, shlex, subprocess, sys, tempfile, time, types, typing
from pathlib import Path
import tomllib

CLI = Path(__file__).resolve().parents[1] / "build/app/rematlab-cli"
COMMON = ("--model llama2-70b --gpu a100-80gb --gpus 64 --seq-len 4096 --global-batch 1024 "
          "--tp 8 --cp 1 --micro-batch 1 --sequence-parallel")
LAYOUTS = {  # name -> the rest of the `layout` options
    "pp2v2 z1 selective": "--pp 2 --virtual-stages 2 --dp 4 --zero 1 --checkpoint selective --offload none",
    "pp2v2 z1 every:1": "--pp 2 --virtual-stages 2 --dp 4 --zero 1 --checkpoint every:1 --offload none",
    "pp1 z1 selective": "--pp 1 --dp 8 --zero 1 --checkpoint selective --offload none",
    "pp1 z2 every:2 off=opt": "--pp 1 --dp 8 --zero 2 --checkpoint every:2 --offload optimizer",
    "pp1 z3 every:1 off=par": "--pp 1 --dp 8 --zero 3 --checkpoint every:1 --offload parameters",
}
# What torchtitan calls what our TOML names (from reading torchtitan 0.2.2 and 0.3.0).
TT_HINTS = {
    "enable_sequence_parallel": "torchtitan <0.3 has no such switch: sequence parallel is always on with tensor_parallel_degree > 1",
    "mode": "torchtitan >=0.3 picks the policy by subcommand activation-checkpoint:{selective,full,memory-budget,none}",
    "selective_ac_option": "torchtitan >=0.3: selective is per-op only (what 'op' meant); per-layer 'N' is gone",
}

def suggest(name, known):
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
    return f" (closest: {close[0]})" if close else ""

def first_line(e):  # the start of an exception's message (two lines: pydantic names the field on the 2nd)
    return f"{type(e).__name__}: {' / '.join(str(e).strip().splitlines()[:2])}"

def run_layout(opts):
    """The JSON object `rematlab-cli layout ... --json` prints last; waits while the binary is rebuilt."""
    for _ in range(10):
        if CLI.exists():
            out = subprocess.run([str(CLI), "layout", *shlex.split(f"{COMMON} {opts}"), "--json"], capture_output=True, text=True)
            if out.returncode == 0:
                return json.loads(out.stdout.strip().splitlines()[-1])
            if CLI.exists():
                raise RuntimeError(out.stderr.strip() or out.stdout.strip())
        time.sleep(30)
    raise RuntimeError(f"{CLI} missing")

# ---------------------------------------------------------------- DeepSpeed
def check_deepspeed(text, lay):
    from deepspeed.runtime import constants as C
    from deepspeed.runtime.zero import config as ZC
    from deepspeed.runtime.activation_checkpointing import config as AC
    from deepspeed.runtime.config import DeepSpeedConfig
    cfg, errs = json.loads(text), []
    known = {v for m in (C, ZC, AC) for k, v in vars(m).items() if k.isupper() and isinstance(v, str)}
    errs += [f"unknown key {k}{suggest(k, known)}" for k in cfg if k not in known]
    act, z = cfg.get(AC.ACT_CHKPT, {}), cfg.get("zero_optimization", {})
    errs += [f"unknown key {AC.ACT_CHKPT}.{k}{suggest(k, AC.ACT_CHKPT_DEFAULT)}" for k in act if k not in AC.ACT_CHKPT_DEFAULT]
    dp = lay["gpus"] // (lay["tp"] * lay["pp"] * lay["cp"])
    try:
        zero = ZC.DeepSpeedZeroConfig(**z)  # pydantic model: unknown fields are rejected
        # Without torch.distributed DeepSpeed takes world size 1: let it derive the batch from
        # micro x accum, then run its own batch assertion with the data-parallel size.
        ds = DeepSpeedConfig({k: v for k, v in cfg.items() if k != "train_batch_size"})
        ds.world_size, ds.train_batch_size = dp, cfg["train_batch_size"]
        ds._batch_assertion()
        back = {"stage": (ds.zero_optimization_stage, z.get("stage", 0)),
                "bf16": (ds.bfloat16_config.enabled, cfg.get("bf16", {}).get("enabled", False))}
        for part in ("offload_param", "offload_optimizer"):
            got = getattr(zero, part)
            back[part] = (got and str(getattr(got.device, "value", got.device)), z.get(part, {}).get("device"))
        back.update({f"act.{k}": (getattr(ds.activation_checkpointing_config, k, None), v) for k, v in act.items()})
        errs += [f"{k} reads back {g!r}, written {w!r}" for k, (g, w) in back.items() if g != w]
    except Exception as e:  # DeepSpeed's own rejection
        errs.append(first_line(e))
    return (f"keys, DeepSpeedZeroConfig, DeepSpeedConfig, batch {cfg.get('train_batch_size')}="
            f"{cfg.get('train_micro_batch_size_per_gpu')}x{cfg.get('gradient_accumulation_steps')}x{dp}"), errs

def deepspeed_estimates(params=7.5e9, nodes=8, per_node=8, largest_layer=32000 * 4096):
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs as z2
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs as z3
    n, GB = nodes * per_node, 1e9
    print(f"\nZeRO model states, {params / 1e9:g}B params on {n} GPUs ({per_node}/node x {nodes} nodes), GB = 1e9 bytes")
    print(f"{'case':34} {'DeepSpeed GPU':>13} {'formula GPU':>11} {'DeepSpeed CPU/node':>18}")
    rows = [("stage 2, no offload", z2(params, per_node, nodes, cpu_offload=False), 2 * params + 14 * params / n),
            ("stage 2, optimizer offload", z2(params, per_node, nodes, cpu_offload=True), None),
            ("stage 3, no offload", z3(params, largest_layer, per_node, nodes, cpu_offload=False), 16 * params / n),
            ("stage 3, optimizer offload", z3(params, largest_layer, per_node, nodes, cpu_offload_params=False), None),
            ("stage 3, optimizer+param offload", z3(params, largest_layer, per_node, nodes), None)]
    for name, (cpu, gpu, *_), formula in rows:
        print(f"{name:34} {gpu / GB:13.2f} {f'{formula / GB:.2f}' if formula else '-':>11} {cpu / GB:18.1f}")
    print(f"(formula 2P+14P/N and 16P/N; DeepSpeed counts 18 bytes/param of sharded state, adds 4 bytes x "
          f"largest layer ({largest_layer / 1e6:.0f}M params) at stage 3, and a 1.5x CPU buffer factor)")

# ---------------------------------------------------------------- torchtitan
def parse_quietly(fn):
    """Run a parser that may print and SystemExit (tyro); return (result, error message)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
        try:
            return fn(), ""
        except SystemExit:
            return None, " ".join(err.getvalue().replace("│", " ").replace("─", "").split())[:300]
        except Exception as e:
            return None, first_line(e)

def unknown_msg(section, key, names):
    return f"unknown key {section}.{key}" + (f" [{TT_HINTS[key]}]" if key in TT_HINTS else suggest(key, names))

def read_back(cfg, data, unknown):
    return [f"{s}.{k} reads back {getattr(getattr(cfg, s), k)!r}, written {v!r}" for s, kv in data.items()
            for k, v in kv.items() if f"{s}.{k}" not in unknown and getattr(getattr(cfg, s), k) != v]

def check_torchtitan(text):
    import torchtitan.config as ttc
    from importlib.metadata import version
    data, errs, unknown = tomllib.loads(text), [], set()
    tag = f"torchtitan {version('torchtitan')}"
    if hasattr(ttc, "JobConfig"):  # 0.2.x: reads the TOML itself
        sections = {f.name: f.type for f in dataclasses.fields(ttc.JobConfig)}
        for s, kv in data.items():
            names = {f.name for f in dataclasses.fields(sections[s])} if s in sections else set()
            unknown |= {f"{s}.{k}" for k in kv if k not in names}
            errs += [unknown_msg(s, k, names) for k in kv if k not in names]
        section, kept = None, []  # the same TOML less the unknown keys, for the read-back
        for line in text.splitlines():
            section = line.strip()[1:-1] if line.startswith("[") else section
            kept += [] if f"{section}.{line.split('=')[0].strip()}" in unknown else [line]
        for body, what in [(text, "as written")] + ([("\n".join(kept), "less unknown keys")] if unknown else []):
            with tempfile.TemporaryDirectory() as scratch:  # gone however the parse ends
                path = os.path.join(scratch, "layout.toml")
                with open(path, "w") as f:
                    f.write(body)
                cfg, msg = parse_quietly(
                    lambda: ttc.ConfigManager().parse_args(["--job.config_file", path]))
            errs += [f"ConfigManager ({what}): {msg}"] if msg else []
        errs += read_back(cfg, data, unknown) if cfg else []
        return f"{tag}: TOML via --job.config_file, keys, read-back", errs
    # 0.3+: no TOML reader. Its Trainer.Config needs a newer torch than 2.11, so parse torchtitan's
    # own section classes with tyro and torchtitan's tyro rules, as its ConfigManager does.
    from torchtitan.distributed import activation_checkpoint as acm
    import tyro
    errs.append(f"{tag} reads no TOML file (configs are Python config_registry functions "
                "plus --section.key options); checked as those options")
    classes = {"parallelism": ttc.ParallelismConfig, "training": ttc.TrainingConfig}
    policies = {typing.get_args(a)[1].name: typing.get_args(a)[0] for a in typing.get_args(acm.ActivationCheckpointingConfig)}
    args, policy = [], None
    for s, kv in data.items():
        names = {f.name for f in dataclasses.fields(classes[s])} if s in classes else set()
        for k, v in kv.items():
            if k in names:
                args += [f"--{s}.{'' if v else 'no-'}{k}"] if isinstance(v, bool) else [f"--{s}.{k}", str(v)]
                continue
            unknown.add(f"{s}.{k}")
            errs.append(unknown_msg(s, k, names))
            if (s, k) == ("activation_checkpoint", "mode"):  # its 0.3 spelling: a subcommand
                policy = str(v).replace("_", "-")
                args.append(f"activation-checkpoint:{policy}")

    @dataclasses.dataclass
    class Sections:
        parallelism: ttc.ParallelismConfig = dataclasses.field(default_factory=ttc.ParallelismConfig)
        training: ttc.TrainingConfig = dataclasses.field(default_factory=ttc.TrainingConfig)
        activation_checkpoint: acm.ActivationCheckpointingConfig = dataclasses.field(default_factory=acm.SelectiveAC.Config)

    ttc.ConfigManager()  # registers torchtitan's tyro rules
    cfg, msg = parse_quietly(lambda: tyro.cli(Sections, args=args, registry=ttc.manager.custom_registry))
    errs += [f"tyro: {msg}"] if msg else []
    if cfg:
        errs += read_back(cfg, {s: kv for s, kv in data.items() if s in classes}, unknown)
        if policy and type(cfg.activation_checkpoint) is not policies.get(policy):
            errs.append(f"activation_checkpoint is {type(cfg.activation_checkpoint).__qualname__}, wanted {policy}")
    return f"{tag}: keys as options into its section classes, read-back", errs

# ---------------------------------------------------------------- Megatron-LM
def megatron_flags(path):
    """{flag: choices or None} from Megatron's arguments.py, and the dataclasses it could not resolve."""
    path = Path(path).resolve()
    src = path.parents[2] if len(path.parents) > 2 else path.parent  # .../megatron/training/arguments.py
    flags, unresolved = {}, []
    for fn in (n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)):
        lists = {t.id: n.value for n in ast.walk(fn) if isinstance(n, ast.Assign) and isinstance(n.value, ast.List)
                 for t in n.targets if isinstance(t, ast.Name)}
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            name, kw = getattr(call.func, "attr", getattr(call.func, "id", "")), {k.arg: k.value for k in call.keywords}
            if name == "add_argument":
                choices = ast.literal_eval(kw["choices"]) if isinstance(kw.get("choices"), (ast.List, ast.Tuple)) else None
                flags.update({a.value: choices for a in call.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")})
            elif name == "ArgumentGroupFactory" and call.args:
                ex = lists.get(kw["exclude"].id) if isinstance(kw.get("exclude"), ast.Name) else kw.get("exclude")
                got = dataclass_flags(src, call.args[0].id, set(ast.literal_eval(ex)) if ex else set())
                flags.update(got) if got is not None else unresolved.append(call.args[0].id)
    return flags, sorted(set(unresolved))

@functools.lru_cache(maxsize=None)
def find_class(src, name):
    for py in (src / "megatron").rglob("*.py") if (src / "megatron").is_dir() else ():
        text = py.read_text(errors="ignore")
        if f"class {name}(" in text or f"class {name}:" in text:
            return next((n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == name), None)
    return None

def dataclass_flags(src, name, exclude):
    """Flags ArgumentGroupFactory makes of a dataclass: --field-name; --no-/--disable- for a bool not
    defaulting to False; or the field's argparse_meta arg_names. Choices from Literal[...]."""
    cls = find_class(src, name)
    if cls is None:
        return None
    flags = {}
    for base in (b for b in cls.bases if isinstance(b, ast.Name)):  # e.g. TransformerConfig(ModelParallelConfig)
        flags.update(dataclass_flags(src, base.id, exclude) or {})
    for node in cls.body:
        if not isinstance(node, ast.AnnAssign) or node.target.id in exclude or "ClassVar" in ast.unparse(node.annotation):
            continue
        ann, default, names = ast.unparse(node.annotation), node.value, None
        if isinstance(default, ast.Call) and getattr(default.func, "id", "") == "field":
            kw = {k.arg: k.value for k in default.keywords}
            default = kw.get("default")
            for meta in (n for n in ast.walk(kw.get("metadata", ast.Dict([], []))) if isinstance(n, ast.Dict)):
                names = next((ast.literal_eval(v) for k, v in zip(meta.keys, meta.values)
                              if isinstance(k, ast.Constant) and k.value == "arg_names"), names)
        dash = node.target.id.replace("_", "-")
        if names is None:
            store_false = ann in ("bool", "Optional[bool]", "bool | None") and not (
                isinstance(default, ast.Constant) and default.value is False)
            names = [f"--no-{dash}", f"--disable-{dash}"] if store_false else [f"--{dash}"]
        lit = next((n for n in ast.walk(node.annotation) if isinstance(n, ast.Subscript) and ast.unparse(n.value) == "Literal"), None)
        flags.update({n: list(ast.literal_eval(lit.slice)) if lit is not None else None for n in names})
    return flags

def check_megatron(text, known, unresolved):
    toks, errs, missing = shlex.split(text), [], []
    for i, tok in enumerate(toks):
        value = toks[i + 1] if i + 1 < len(toks) and not toks[i + 1].startswith("--") else None
        if tok.startswith("--") and tok not in known:
            missing.append(tok) if unresolved else errs.append(f"unknown flag {tok}{suggest(tok, known)}")
        elif tok.startswith("--") and known[tok] and value is not None and value not in map(str, known[tok]):
            errs.append(f"{tok} {value}: not one of {known[tok]}")
    if missing:  # "?": may come from dataclasses this copy of arguments.py could not be resolved against
        errs.append(f"? not literal in arguments.py: {' '.join(missing)}; unresolved dataclasses: {', '.join(unresolved)}")
    return f"{sum(t.startswith('--') for t in toks)} flags vs {len(known)} defined, choices", errs

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--peers", default=str(Path.home() / ".cache/rematlab/peers"),
                    help="where DeepSpeed and torchtitan are installed (an os.pathsep-separated list)")
    ap.add_argument("--megatron-arguments", help="Megatron-LM's megatron/training/arguments.py (see above)")
    a = ap.parse_args()
    peers = [p for p in a.peers.split(os.pathsep) if p]
    if not peers or not all(Path(p).is_dir() for p in peers):
        sys.exit(f"no peers in {a.peers}; install them like this:\n  D=" + __doc__.split("  D=")[1].split("--peers")[0])
    sys.path[:0] = peers
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # configs only; no device needed
    try:
        import tensorboard  # noqa: F401  (torchtitan imports torch.utils.tensorboard at import time)
    except ImportError:  # not needed to parse configs: a stub rather than another install
        stub = sys.modules["torch.utils.tensorboard"] = types.ModuleType("torch.utils.tensorboard")
        stub.SummaryWriter = object
    known, unresolved = megatron_flags(a.megatron_arguments) if a.megatron_arguments else ({}, [])
    rows = []
    for name, opts in LAYOUTS.items():
        out = run_layout(opts)
        lay, ex = dict(out["layouts"][0], gpus=out["gpus"]), out["exports"]
        checks = [("deepspeed", lambda: check_deepspeed(ex["deepspeed"]["text"], lay)),
                  ("torchtitan", lambda: check_torchtitan(ex["torchtitan"]["text"]))]
        checks += [("megatron", lambda: check_megatron(ex["megatron"]["text"], known, unresolved))] if known else []
        for tool, fn in checks:
            try:
                how, errs = fn()
            except ImportError as e:
                how, errs = "not installed", [f"{e} (see --peers)"]
            ok = "yes" if not errs else "?" if all(e.startswith("?") for e in errs) else "no"
            rows.append((name, tool, ok, how, errs))
    print(f"{'layout':24} {'tool':10} {'ok':3} what was checked / errors")
    for name, tool, ok, how, errs in rows:
        print(f"{name:24} {tool:10} {ok:3} {how}" + "".join(f"\n{'':39}- {e}" for e in errs))
    try:
        deepspeed_estimates()
    except ImportError as e:
        print(f"DeepSpeed estimators unavailable: {e}")

if __name__ == "__main__":
    main()
