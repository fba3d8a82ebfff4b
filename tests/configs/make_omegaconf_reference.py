"""OmegaConf's own resolution of interpolations, the reference of configs/omegaconf_interpolation
(a CTest fixture).

    make_omegaconf_reference.py OUT_DIR

For each YAML document of CASES, OmegaConf.create(text) then to_container(resolve=True) (the
pinned omegaconf, from <venv>/espnet-inference, tools/setup.sh), written to
OUT_DIR/omegaconf_cases.json as {"name": {"yaml": ..., "resolved": ...}} or, where OmegaConf
refuses, {"yaml": ..., "error": <its exception type>}.
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(sys.prefix) / "espnet-inference"))
from omegaconf import OmegaConf  # noqa: E402

CASES = {
    "absolute": "sample_rate: 16000\npreprocessor:\n  sample_rate: ${sample_rate}\n"
                "  window: hann\n",
    "relative": "a:\n  x: 1\n  y: ${.x}\n  z: ${..top}\ntop: 5\n",
    "containers": "base:\n  d_model: 256\n  heads: [4, 8]\nenc: ${base}\ndec:\n  cfg: ${base}\n"
                  "  first: ${base.heads[0]}\n",
    "strings": "name: fc\ndir: /tmp\nver: 2\nflag: true\nnothing: null\n"
               "path: ${dir}/${name}_v${ver}.model\ns: is_${flag}\nn: x${nothing}\n",
    "lists": "l: [10, 20, 30]\na: ${l[1]}\nb: ${l.2}\nnested:\n- k: 1\n- k: ${l[0]}\n",
    "chains": "a: ${b}\nb: ${c.d}\nc:\n  d: 7.5\n",
    "through": "a: ${c}\nc:\n  d: 3\ne: ${a.d}\n",
    "key_inside": "which: x\nopts:\n  x: 1\n  y: 2\nval: ${opts.${which}}\n",
    "escaped": "lit: \\${not}\nalso: \"a\\\\${b}\"\n",
    "null_target": "n: null\nm: ${n}\n",
    "missing_key": "a: ${nope}\n",
    "cycle": "a: ${b}\nb: ${a}\n",
    "resolver": "h: ${oc.env:HOME}\n",
    "missing_value": "a: ???\nb: ${a}\n",
}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = {}
    for name, text in CASES.items():
        try:
            resolved = OmegaConf.to_container(OmegaConf.create(text), resolve=True)
            out[name] = {"yaml": text, "resolved": resolved}
        except Exception as e:  # noqa: BLE001 - the type is the reference's answer
            out[name] = {"yaml": text, "error": type(e).__name__}
    folder = Path(sys.argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "omegaconf_cases.json").write_text(json.dumps(out, indent=1))
    print(f"wrote {len(out)} OmegaConf cases to {folder}")


if __name__ == "__main__":
    main()
