"""Record the collection live into a new recording, then compare it with the published figures.

    make record-dry-run   # which calls would go live, and what they would cost; needs no key
    make record           # with TYPESAFE_API_KEY (and TYPESAFE_ENDPOINT) set
    make record-calls     # the same calls and report, without running the notebooks
    python -m tools.record notebooks/03_probe_experiment.ipynb   # every call; this notebook only
    make accept-recording # after review: the new recording replaces the committed one

Recording never touches json_cache/json_cache.json: answers go to
json_cache/json_cache.new.json (resumed if a run was interrupted) and the notebooks run
into build/recorded/. The two customers' calls are independent of each other, so they are recorded
side by side first; the notebooks then replay the new recording (not with --calls-only, which stops
at the report). The API's own retry policy handles rate limits and server errors; a call that still
fails is explained, and nothing wrong is recorded.

Any failure, Ctrl-C or SIGTERM stops the whole run within seconds: calls still in flight are
abandoned, the notebook kernels are stopped, and one line says what failed, how many answers the
new recording keeps (every one received before the stop) and how to resume.

    __main__.py    the command: Ctrl-C handled from the first moment, then cli.main
    cli.py         the arguments, checked before anything is sent
    every_call.py  the set of calls the collection makes (also what tools.build_recording runs)
    run.py         a live run: the calls, the notebooks on the new recording, stopping it cleanly
    dry_run.py     which calls a recording would send, and their cost
    missing.py     the calls a recording lacks: the one list every command prints, how to record
    report.py      the new recording against the published figures and the committed recording
    accept.py      the new recording replaces the committed one, with its provenance

This package imports nothing itself, so that `python -m tools.record` handles Ctrl-C before the
slow imports.
"""
