"""Program text for the sandbox runners (mbxp_runner.py, lcb_runner.py), not perfdag code: what human-eval's
reliability_guard takes away, as both mxeval's and LiveCodeBench's testing_util copies keep it. Each runner
puts it in front of its own program and calls `take_away()` from its own guard, which adds where the two
differ (mxeval also removes exit and disables faulthandler; LiveCodeBench keeps exit).

The guard is not what contains a program (the sandbox is: SANDBOX.md); it is kept because what a program
can call changes what it does, and so its verdict, as in MLCommons' runs."""
from __future__ import annotations

TAKE_AWAY = r'''
import os, sys


def take_away():
    os.environ["OMP_NUM_THREADS"] = "1"
    for name in ("kill system putenv remove removedirs rmdir fchdir setuid fork forkpty killpg "
                 "rename renames truncate replace unlink fchmod fchown chmod chown chroot "
                 "lchflags lchmod lchown getcwd chdir").split():
        setattr(os, name, None)
    import shutil, subprocess
    shutil.rmtree = shutil.move = shutil.chown = None
    subprocess.Popen = None
    for name in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
        sys.modules[name] = None
'''
