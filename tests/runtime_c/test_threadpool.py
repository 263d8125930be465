"""The thread pool alone: every part runs exactly once per run, across threads, under TSan."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[2] / "runtime_c"

PROGRAM = r"""
#include <stdio.h>
#include "threadpool.h"

typedef struct { int hits[64]; long sum; pthread_mutex_t mu; } acc;

static void task(void *ctx, int part, int parts) {
    acc *a = (acc *)ctx;
    long s = 0, i;
    for (i = part; i < 100000; i += parts) s += i;
    pthread_mutex_lock(&a->mu);
    a->hits[part]++;
    a->sum += s;
    pthread_mutex_unlock(&a->mu);
}

int main(int argc, char **argv) {
    fc_pool pool;
    int threads = argc > 1 ? argv[1][0] - '0' : 2, run, p;
    if (fc_pool_start(&pool, threads) != 0) return 2;
    for (run = 0; run < 200; ++run) {
        acc a = {{0}, 0, PTHREAD_MUTEX_INITIALIZER};
        int parts = 1 + run % 7;
        fc_pool_run(&pool, task, &a, parts);
        if (a.sum != 4999950000L) return 3;
        for (p = 0; p < parts; ++p) if (a.hits[p] != 1) return 4;
    }
    fc_pool_run(NULL, task, &(acc){{0}, 0, PTHREAD_MUTEX_INITIALIZER}, 3);
    fc_pool_stop(&pool);
    puts("ok");
    return 0;
}
"""


@pytest.mark.parametrize("threads", ["1", "2", "4"])
@pytest.mark.parametrize("sanitize", [[], ["-fsanitize=thread"]])
def test_every_part_runs_once(tmp_path, threads, sanitize):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    src = tmp_path / "pool_test.c"
    src.write_text(PROGRAM)
    exe = tmp_path / "pool_test"
    build = subprocess.run(
        [
            cc,
            "-std=c99",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            *sanitize,
            f"-I{RUNTIME}",
            str(src),
            str(RUNTIME / "threadpool.c"),
            "-o",
            str(exe),
            "-pthread",
        ],
        capture_output=True,
        text=True,
    )
    if build.returncode and sanitize:
        pytest.skip(f"no thread sanitizer here: {build.stderr[:200]}")
    assert build.returncode == 0, build.stderr
    res = subprocess.run([str(exe), threads], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]
