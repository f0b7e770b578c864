"""One-off generators, never packaged and not part of the ``sagegate`` command: the model
export and label extraction (``export_model.py``, ``make_labels.py``, with their own Python
3.11 virtualenv, ``requirements-export.txt``), crafted test images (``crafted_images.py``)
and the CPU measurement behind docs/DEPLOY.md (``measure_cpu.py``). Developer and deploy
tools live in :mod:`sagegate`."""
