#!/bin/bash
# issue 26 fig 4: the demo's calibration (seeds 2 x group 2 per level, T 1.0, 192 tokens / 12 turns) of the demo's
# warm-started base on the derived env at the demo's target difficulty 1, every start depth
source /work/venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRACE_CACHE=/tmp/trace-cache PYTHONPATH=/work/frozen37b OMP_NUM_THREADS=1
cd /work/frozen37b
cap=$1
python -c "
import sys
from trace_gym.derived.registration import ENTRY_POINT
from trace_gym.registration import register_env
register_env('trace/retail-$cap-d1-v0', entry_point=ENTRY_POINT, kwargs={'target_id': 'trace/retail-v2', 'capability': '$cap', 'target_kwargs': {'difficulty': 1}})
from trace_train.cli import main
sys.exit(main(['calibrate', 'trace/retail-$cap-d1-v0', '--model', '/work/runs/demo37/01-base/sft-0/merged',
 '--seeds', '2', '--group-size', '2', '--temperature', '1.0', '--max-new-tokens', '192', '--max-turns', '12',
 '--no-write', '--json', '/work/runs/calib37/$cap.json', '--threads', '1']))
"
