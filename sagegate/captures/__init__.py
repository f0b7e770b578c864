"""``sagegate capture``: data capture records read back on this machine (never deployed).

:mod:`~sagegate.captures.reader` is the command (a folder, a file or an ``s3://`` prefix in,
JSON Lines or CSV out, or a Model Monitor record preprocessor's rows); it makes its default
rows with :mod:`~sagegate.captures.rows`, each endpoint's named with the labels
:mod:`~sagegate.captures.labels` finds for it (a stage's registry, read through
:mod:`sagegate.deploy.stages`). The records' shape and a preprocessor's call are the Lambda
package's own (:mod:`chalicelib.capture`, :mod:`chalicelib.monitor.preprocessing`).
"""
