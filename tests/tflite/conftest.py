"""The tests' .tflite writer (tflite_files.py) is imported by name from this folder."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
