#!/bin/bash
# A job script as a scheduler would run it: the python step is OOM-killed.
echo "train.sh: starting"
python3 tools/capture/workloads/hog.py
echo "train.sh: python exited with status $?"
