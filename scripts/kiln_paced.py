"""A `kiln bench … --paced` process for the benchmark scripts: the model compiled once, a batch
of runs timed whenever the script asks (`bench_onnx.py` alternates it with ONNX Runtime,
`ab_kernels.py` with another kiln binary)."""
import subprocess
import tempfile


class PacedKiln:
    """`batch()` returns (median µs, fastest µs, {kernel: µs}) of one batch — the kernels' times
    only with `--profile` among `args`; an early exit of kiln raises RuntimeError with its error."""

    def __init__(self, args):
        # Its messages go to a file: a pipe nobody reads would stall it once full.
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(list(args) + ["--paced"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True)

    def batch(self):
        try:
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:  # kiln has exited: its messages say why
            line = ""
        if not line:
            self.proc.wait()
            self.stderr.seek(0)
            lines = self.stderr.read().strip().splitlines()
            err = next((l for l in lines if l.startswith("error")), lines[-1] if lines else "")
            raise RuntimeError(err or f"kiln exited with {self.proc.returncode}")
        median, fastest, *kernels = line.split()
        return float(median), float(fastest), {k: float(us) for k, us in (kv.split("=", 1) for kv in kernels)}

    def close(self):
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        self.proc.wait()
        self.stderr.close()
