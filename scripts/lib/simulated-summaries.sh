#!/usr/bin/env bash
# Writes the summaries the docs quote from the simulator's tables in DIR (scripts/simulate):
# DIR/performance.md (every table, for docs/performance.md), DIR/readme-sizing.md,
# DIR/deployment-instances.md, DIR/deployment-cost.md and DIR/backup-cost.md.
set -euo pipefail
dir=$1
# What the summaries came from: the stamps of the tables (commit, date, machine), each once.
stamps() {
  for f in "$@"; do grep -h '^Commit ' "$f"; done | sed 's/ Command:.*//; s/\.$//; s/ [0-9][0-9]:[0-9][0-9] UTC//' | sort -u |
    paste -sd ';' | sed 's/;/; /g'
}

# Rows of the tables matching a case pattern, with chosen columns (1-based among the cells).
rows() {
  local pattern=$1 columns=$2
  shift 2
  cat "$@" 2>/dev/null | awk -F'|' -v pattern="$pattern" -v columns="$columns" '
    $2 ~ pattern && $2 !~ /published/ {
      n = split(columns, c, ",")
      line = "|"
      for (i = 1; i <= n; i++) line = line " " $(c[i] + 1) " |"
      gsub(/  +/, " ", line)
      print line
    }'
}

tables=()
for plan in consumption flex; do
  for capacity in 20000 40000 60000 100000; do
    for mode in default capped; do
      f=$dir/$plan-$capacity-$mode.md
      [ -s "$f" ] && tables+=("$f")
    done
  done
done
[ ${#tables[@]} -gt 0 ] || { echo "no simulated tables in $dir" >&2; exit 1; }
# The tables of one plan (or every plan, "") at default settings, by capacity (a glob would
# sort 100000 before 20000).
defaults() {
  for f in "${tables[@]}"; do
    case $f in *"/$1"*-default.md) echo "$f" ;; esac
  done
}
mapfile -t consumption_defaults < <(defaults consumption-)
mapfile -t all_defaults < <(defaults "")
from="From the tables of \`scripts/simulate\` in docs/performance.md (\"Simulation at Azure scale\", each with its command): $(stamps "${tables[@]}")."

{
  for f in "${tables[@]}"; do
    name=$(basename "$f" .md)
    echo "#### ${name//-/, }"
    echo
    cat "$f"
    echo
  done
  if [ -s "$dir/validation.md" ]; then
    echo "#### The published design on the published runs"
    echo
    cat "$dir/validation.md"
  fi
} >"$dir/performance.md"

# The largest size simulated for the summaries.
size=3.5m
grep -q -- '-35m |' "${tables[@]}" 2>/dev/null && size=35m

{
  echo "$from Consumption, default settings, an application sending a tenth of the capacity to the scanned account."
  echo
  echo "| ${size} rows | capacity (entities/s) | minutes | bound (min) | x bound | peak instances |"
  echo "| --- | --- | --- | --- | --- | --- |"
  rows "^ (count|copy|copy-within)-${size} $" 1,3,6,7,9,13 "${consumption_defaults[@]}"
} >"$dir/readme-sizing.md"

{
  echo "$from Default settings, an application sending a tenth of the capacity."
  echo
  echo "| case | plan | capacity (entities/s) | minutes | peak instances | steps given back | longest step (s) |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  rows "^ [a-z-]+-${size} $" 1,2,3,6,13,16,12 "${all_defaults[@]}"
} >"$dir/deployment-instances.md"

{
  echo "$from USD per million rows at list prices (table and queue transactions, executions, instance time; free grants not counted); cap: half the capacity, or default."
  echo
  echo "| case | plan | capacity (entities/s) | cap | USD per million rows |"
  echo "| --- | --- | --- | --- | --- |"
  rows "^ (count|copy|copy-within)-[0-9.]+m $" 1,2,3,4,15 "${tables[@]}"
} >"$dir/deployment-cost.md"

{
  echo "$from An export writes one blob per step (gzip JSON lines); blob writes at list price are in the figure."
  echo
  echo "| case | plan | capacity (entities/s) | cap | minutes | USD per million rows |"
  echo "| --- | --- | --- | --- | --- | --- |"
  rows "^ (export|copy)-[0-9.]+m $" 1,2,3,4,6,15 "${tables[@]}"
} >"$dir/backup-cost.md"
