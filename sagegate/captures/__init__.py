"""``sagegate capture``: data capture records read back on this machine (never deployed).

:mod:`~sagegate.captures.reader` is the command; its default rows come from
:mod:`~sagegate.captures.rows`, each endpoint's named with the labels
:mod:`~sagegate.captures.labels` finds for it. The records' shape and a preprocessor's call are
the Lambda package's own (:mod:`chalicelib.capture`, :mod:`chalicelib.monitor.preprocessing`).
"""
