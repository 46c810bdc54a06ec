# The kernel's per-task probes of the expert schedule for the level-5 families the sim misprices
# (issue 39), run on a GPU host as `bash bench/device/probe_families.sh` with .whl/ carried; writes
# task_probe_<model>.json under $OUT. The default schedules' probes (task_probe_default_*.json) came
# from the same command with `--extra default=bench/variants/default.txt --tag _default_<model>`.
. bench/device/setup.sh
for m in mk_gpt2_large_batch2 mk_hf_smollm2_360m; do
  timeout 200 python3 bench/task_probe.py --out $OUT --model $m --runs 3 --layers 2 13 --tag _$m > $OUT/$m.log 2>&1
  echo "$m rc=$?"; tail -30 $OUT/$m.log
done
timeout 220 python3 bench/task_probe.py --out $OUT --model mk_qwen3_0p6b --runs 3 --layers 2 13 --tag _mk_qwen3_0p6b \
  --extra halves=bench/variants/qwen3_qk_halves.txt > $OUT/qwen.log 2>&1
echo "qwen rc=$?"; tail -60 $OUT/qwen.log
