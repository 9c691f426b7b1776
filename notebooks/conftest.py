"""Executed notebooks record every output, so progress bars (widgets or text, shown only
after 2 s, i.e. depending on the machine's speed) must never appear in them: the kernels
nbval starts inherit this process's environment."""

import os

os.environ["TOOLKIT_PROGRESS"] = "0"
