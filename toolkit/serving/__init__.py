"""Serving layer: how long things take. A step-level model of one deployment, fitted to and
validated on measured InferenceX points, and the only source of step times: other layers ask
it through :mod:`.scenario` (decode step, TPOT, tokens/s/GPU, prefill of one deployment);
the host-to-device transfer paths (:mod:`.transfer`) and the tier replay's service times
(:mod:`.tier_service`) live here too. Reads specs and measured points; never replays and
never prices.

``validate`` checks a table of measured points; ``cross_validate`` (:mod:`.crossval`) judges
the fitted model on points it did not see."""

from toolkit.serving.crossval import cross_validate, error_table
from toolkit.serving.params import ServingParams, bundled_params
from toolkit.serving.points import PointsError, bundled_points_path, read_points, validate
from toolkit.serving.predict import PRED_COLUMNS, predict

__all__ = [
    "PRED_COLUMNS",
    "PointsError",
    "ServingParams",
    "bundled_params",
    "bundled_points_path",
    "cross_validate",
    "error_table",
    "predict",
    "read_points",
    "validate",
]
