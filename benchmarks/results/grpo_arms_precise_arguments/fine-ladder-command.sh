#!/bin/bash
# issue 29: does the fine ladder give the trained adapter a rung between mastered and failed? The fixed arm's
# adapter (precise-arguments, level 1 learnt to 1.00 training success, level 2 of the standard ladder 0) on the
# fine ladder's levels 1-3 (0, 1, 2 oracle actions before the decision), the demo's caps, T 1.0
source /work/venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRACE_CACHE=/tmp/trace-cache PYTHONPATH=/work/main
cd /work/main
python -c "
import sys
from trace_gym.derived.registration import ENTRY_POINT
from trace_gym.registration import register_env
register_env('trace/retail-precise-arguments-d1-fine-v0', entry_point=ENTRY_POINT, kwargs={'target_id': 'trace/retail-v2', 'capability': 'precise-arguments', 'target_kwargs': {'difficulty': 1}, 'ladder': 'fine'})
from trace_train.cli import main
sys.exit(main(['calibrate', 'trace/retail-precise-arguments-d1-fine-v0', '--model', '/work/runs/demo37/01-base/sft-0/merged',
 '--adapter', '/work/runs/arms38/$1/adapter', '--levels', '1', '2', '3', '--seeds', '4', '--group-size', '4', '--temperature', '1.0',
 '--max-new-tokens', '192', '--max-turns', '12', '--no-write', '--json', '/work/runs/fine38/$1.json', '--threads', '2']))
"
