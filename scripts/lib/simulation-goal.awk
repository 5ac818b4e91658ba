# Reads simulator tables (scripts/simulate's DIR/*.md) and writes, in Markdown, how many cases
# meet each part of the product's goal and which miss it (issue 34): every case longer than
# 5 minutes within 10% of its bound, the application's refused share under 1%, no item failed
# for good, the longest step under 30 s, the ledger partition's mean under half its 2,000
# entities/s. Columns as the simulator prints them (`simulator --header-only`).
#
#   awk -f scripts/lib/simulation-goal.awk DIR/consumption-*.md DIR/flex-*.md
BEGIN {
  FS = "|"
  goals["bound"] = "within 10% of the bound (cases over 5 minutes)"
  goals["refused"] = "application refused under 1%"
  goals["failed"] = "no item failed for good"
  goals["step"] = "longest step under 30 s"
  goals["ledger"] = "ledger partition mean under 1,000 entities/s"
  order[1] = "bound"; order[2] = "refused"; order[3] = "failed"; order[4] = "step"; order[5] = "ledger"
}

# One row of a table: the first cell is a case, not the header or its rule.
/^\| [a-z]/ && $2 !~ /^ case / {
  for (i = 2; i <= NF; i++) { gsub(/^ +| +$/, "", $i) }
  cases++
  name = $2 " | " $3 " | " $4 " | " $5
  minutes = $7 + 0
  ratio = $10 + 0
  refused = $11; sub(/%/, "", refused)
  split($15, ledger, "/")
  if (minutes > 5) {
    long++
    if (ratio > 1.10) miss("bound", name, "x bound " $10 ", " $7 " min")
  }
  if (refused + 0 >= 1) miss("refused", name, "app refused " $11)
  if ($12 + 0 > 0) miss("failed", name, $12 " failed for good")
  if ($13 + 0 >= 30) miss("step", name, "longest step " $13 " s")
  if (ledger[1] + 0 >= 1000) miss("ledger", name, "ledger mean " ledger[1] " entities/s")
}

function miss(goal, name, what) {
  missed[goal]++
  list[goal] = list[goal] "| " name " | " what " |\n"
}

END {
  printf "%d cases, %d of them longer than 5 minutes.\n\n", cases, long
  print "| goal | cases that miss it |"
  print "| --- | --- |"
  for (i = 1; i <= 5; i++) printf "| %s | %d |\n", goals[order[i]], missed[order[i]] + 0
  for (i = 1; i <= 5; i++) {
    g = order[i]
    if (!missed[g]) continue
    printf "\n#### Missed: %s\n\n", goals[g]
    print "| case | plan | capacity (entities/s) | cap | how |"
    print "| --- | --- | --- | --- | --- |"
    printf "%s", list[g]
  }
}
