"""The hybrid GDN geometry a plan needs, read from a model's config.json (a file, or the model's folder).

SGLang sizes a GDN model's mamba pool from its Qwen3-Next / Qwen3.5 config classes: the GDN layers are the
layers l with (l + 1) % `full_attention_interval` != 0 (`layers_block_type`), and each rank holds
`linear_num_key_heads` / attention TP key heads and `linear_num_value_heads` / attention TP value heads.
Only those fields are read; a model SGLang does not build as hybrid GDN is refused, naming the field.
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass

from replayssm_overlay.plan.errors import PlanInputError

#: config.json `model_type`s SGLang serves as hybrid GDN models (its Qwen3-Next and Qwen3.5 config classes)
GDN_MODEL_TYPES = ("qwen3_next", "qwen3_5", "qwen3_5_moe")
FULL_ATTENTION_INTERVAL_DEFAULT = 4  # the Qwen3-Next config class's default
SSM_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
GEOMETRY_FIELDS = (
    "num_hidden_layers",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)


@dataclass(frozen=True)
class GdnModel:
    """A hybrid GDN model's whole-model geometry (before TP)."""

    name: str
    path: str
    model_type: str
    num_hidden_layers: int
    full_attention_interval: int
    linear_num_key_heads: int  # H
    linear_num_value_heads: int  # HV
    linear_key_head_dim: int  # K
    linear_value_head_dim: int  # V
    linear_conv_kernel_dim: int
    mamba_ssm_dtype: str | None  # the config's own, if it names one

    @property
    def gdn_layers(self) -> int:
        return sum(1 for layer in range(self.num_hidden_layers) if (layer + 1) % self.full_attention_interval)

    def check_tp(self, attn_tp: int) -> None:
        """PlanInputError unless attention TP `attn_tp` splits the key and value heads evenly."""
        for field in ("linear_num_key_heads", "linear_num_value_heads"):
            heads = getattr(self, field)
            if heads % attn_tp:
                divisors = [d for d in range(1, heads + 1) if heads % d == 0]
                raise PlanInputError(
                    f"attention TP {attn_tp} does not divide the model's {field} ({heads}): SGLang's GDN "
                    f"ReplaySSM path needs whole heads per rank",
                    f"use a TP (per DP group: --tp / --dp) that divides {heads}: " + ", ".join(map(str, divisors)),
                )


def config_path(path) -> pathlib.Path:
    """`path` itself, or `path/config.json` for a model folder."""
    path = pathlib.Path(path)
    return path / "config.json" if path.is_dir() else path


def load(path, stdin=None) -> GdnModel:
    """The model at `path` (its config.json or its folder; "-": the config.json's text on `stdin`);
    PlanInputError naming the field otherwise."""
    file = pathlib.Path("<stdin>/config.json") if str(path) == "-" else config_path(path)
    try:
        config = json.loads(stdin.read() if str(path) == "-" else file.read_text())
    except OSError as error:
        raise PlanInputError(
            f"cannot read the model's config.json {file}: {error.strerror or error}",
            "pass the model folder or its config.json (--model)",
        ) from error
    except ValueError as error:
        raise PlanInputError(f"{file} is not JSON: {error}", "pass the model's own config.json") from error
    if not isinstance(config, dict):
        raise PlanInputError(f"{file} is not a JSON object", "pass the model's own config.json")
    return from_config(config, name=file.parent.name, path=str(file))


def from_config(config: dict, *, name: str, path: str) -> GdnModel:
    model_type = config.get("model_type")
    if model_type not in GDN_MODEL_TYPES:
        raise PlanInputError(
            f"{path}: model_type {model_type!r} is not a hybrid GDN model (ReplaySSM spec-verify through the "
            f"overlay is for GDN models: model_type one of {', '.join(GDN_MODEL_TYPES)})",
            "pass the config.json of a Qwen3-Next or Qwen3.5 model",
        )
    text = config.get("text_config", config) if model_type != "qwen3_next" else config
    if not isinstance(text, dict):
        raise PlanInputError(f"{path}: text_config is not a JSON object", "pass the model's own config.json")
    prefix = "" if text is config else "text_config."
    values = {field: _positive(text, prefix + field, path) for field in GEOMETRY_FIELDS}
    interval = text.get("full_attention_interval", FULL_ATTENTION_INTERVAL_DEFAULT)
    if not isinstance(interval, int) or isinstance(interval, bool) or interval < 1:
        raise PlanInputError(
            f"{path}: full_attention_interval must be a positive integer, got {interval!r}",
            "pass the model's own config.json",
        )
    dtype = text.get("mamba_ssm_dtype", config.get("mamba_ssm_dtype"))
    if dtype is not None and dtype not in SSM_DTYPE_BYTES:
        raise PlanInputError(
            f"{path}: mamba_ssm_dtype {dtype!r} is not one SGLang takes ({', '.join(SSM_DTYPE_BYTES)})",
            "pass --mamba-ssm-dtype",
        )
    model = GdnModel(
        name=name, path=path, model_type=model_type, full_attention_interval=interval, mamba_ssm_dtype=dtype, **values
    )
    if model.gdn_layers == 0:
        raise PlanInputError(
            f"{path}: no GDN layer (full_attention_interval {interval} makes every layer full attention)",
            "pass the config.json of a hybrid GDN model",
        )
    return model


def _positive(text: dict, field: str, path: str) -> int:
    value = text.get(field.rpartition(".")[2])
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise PlanInputError(
            f"{path}: {field} is {'missing' if value is None else repr(value)}; a hybrid GDN "
            "config.json has it as a positive integer",
            "pass the model's own config.json (every linear_* field of a Qwen3-Next / Qwen3.5 model)",
        )
    return value
