"""Public cluster traces, read into one :class:`~kalena.traces.model.Trace` for replay.

Readers: :mod:`kalena.traces.google2011`, :mod:`kalena.traces.google2019`,
:mod:`kalena.traces.alibaba2017`, :mod:`kalena.traces.alibaba2018`. Each streams its tables
(bounded memory: only the kept machines' tasks and their usage are held) and converts to Kalena's
units (:mod:`kalena.traces.model`).
"""
