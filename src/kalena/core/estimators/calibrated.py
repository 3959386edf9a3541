"""The decay estimator's shipped defaults: the calibration protocol's knee (seed 000 §6.4).

Generated on 2026-12-02 by

    kalena calibrate --write-defaults

Every run is in ``kalena/sim/params/calibration.json``; how the knee is chosen, in
:mod:`kalena.sim.calibration`. Do not edit by hand: run it again.
"""

DEFAULT_MARGIN = 1.15
DEFAULT_HALF_LIFE_S = 300.0
