"""Model specs as data: one TOML file per model under ``specs/``, every value sourced.

``get_model("glm-5.3").indexer_layers`` gives the IndexShare Full layers; add your own
with :func:`register_model` or the ``toolkit.models`` entry-point group.
"""

from toolkit.models.spec import (
    MODELS,
    ModelSpec,
    get_model,
    indexer_layer_ids,
    load_model,
    model_names,
    register_model,
)

__all__ = [
    "MODELS",
    "ModelSpec",
    "get_model",
    "indexer_layer_ids",
    "load_model",
    "model_names",
    "register_model",
]
