"""Diagnostics: measurements that explain results rather than time them (fork-gap spread, the token-class oracle
head, the head report by token class, the constant-w measuring stick, the advantage-estimator comparison at equal
decoded tokens, the embedded trio's quality bars). Speed benchmarks live in bench/. Run each as a script from the
repository root, e.g. `python diagnostics/fork_gaps.py <critic run dir>`."""
