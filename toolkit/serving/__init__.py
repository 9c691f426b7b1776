"""Serving layer: a step-level model of one deployment, fitted to and validated on measured
InferenceX points. Reads specs and measured points; never replays."""

from toolkit.serving.params import ServingParams, bundled_params
from toolkit.serving.points import PointsError, bundled_points_path, read_points, validate
from toolkit.serving.predict import PRED_COLUMNS, predict

__all__ = [
    "PRED_COLUMNS",
    "PointsError",
    "ServingParams",
    "bundled_params",
    "bundled_points_path",
    "predict",
    "read_points",
    "validate",
]
