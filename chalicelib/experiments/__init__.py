"""Traffic experiments at the front: which arm serves a request (:mod:`.assign`), and the
shadows that get a copy after the caller's answer (:mod:`.shadows`)."""
