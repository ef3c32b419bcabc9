#!/usr/bin/env bash
# Re-plan every example and re-render its deploy files, so examples/ always passes 'specplug check'.
#   bash scripts/regen_examples.sh            # all examples
#   bash scripts/regen_examples.sh examples/smollm2-embedded-cpu
# Each example pins stack.version and names its hardware, so the output does not depend on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
SPECPLUG=${SPECPLUG:-.venv/bin/specplug}
dirs=("$@")
if [ ${#dirs[@]} -eq 0 ]; then
  dirs=(examples/*/)
fi
for dir in "${dirs[@]}"; do
  dir=${dir%/}
  "$SPECPLUG" plan -c "$dir/specplug.yaml"
  rm -rf "$dir/deploy"
  "$SPECPLUG" deploy -c "$dir/specplug.yaml" -o "$dir/deploy" >/dev/null
  "$SPECPLUG" check -c "$dir/specplug.yaml" --rendered "$dir/deploy"
done
