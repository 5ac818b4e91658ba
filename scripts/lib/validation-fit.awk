# Reads the simulator's rows of the published design (case, capacity, minutes) and prints, per
# capacity, each published run's residual (simulated minutes against published), and for each
# pair of runs the capacity (of those simulated) that fits the pair best (least squared log
# residuals) with the third run's residual there.
BEGIN {
  FS = "|"
  published["copy-within-3.5m"] = 5; published["copy-within-7m"] = 6; published["copy-within-35m"] = 28
  n = split("copy-within-3.5m copy-within-7m copy-within-35m", runs, " ")
}
/\(published design\)/ {
  c = $2; sub(/ \(published design\)/, "", c); gsub(/ /, "", c)
  cap = $4 + 0; minutes = $7 + 0
  sim[c, cap] = minutes; seen[cap]++
}
END {
  printf "| capacity (entities/s) | 3.5M: simulated min (published 5) | residual | 7M: simulated (published 6) | residual | 35M: simulated (published 28) | residual |\n"
  printf "| --- | --- | --- | --- | --- | --- | --- |\n"
  # Only capacities at which all three runs were simulated.
  m = 0
  for (cap in seen) if (seen[cap] == n) sorted[++m] = cap + 0
  for (i = 2; i <= m; i++) for (j = i; j > 1 && sorted[j - 1] > sorted[j]; j--) {
    t = sorted[j]; sorted[j] = sorted[j - 1]; sorted[j - 1] = t
  }
  for (i = 1; i <= m; i++) {
    cap = sorted[i]
    printf "| %d |", cap
    for (r = 1; r <= n; r++) {
      run = runs[r]
      printf " %.1f | %+.0f%% |", sim[run, cap], 100 * (sim[run, cap] / published[run] - 1)
    }
    printf "\n"
  }
  printf "\n| fitted on | best capacity of those simulated | their residuals | predicts | residual of the prediction |\n| --- | --- | --- | --- | --- |\n"
  for (left = 1; left <= n; left++) {
    best = -1; bestcost = 1e18
    a = runs[left % n + 1]; b = runs[(left + 1) % n + 1]; third = runs[left]
    for (i = 1; i <= m; i++) {
      cap = sorted[i]
      ra = log(sim[a, cap] / published[a]); rb = log(sim[b, cap] / published[b])
      cost = ra * ra + rb * rb
      if (cost < bestcost) { bestcost = cost; best = cap }
    }
    printf "| %s, %s | %d | %+.0f%%, %+.0f%% | %s | %+.0f%% |\n", a, b, best, \
      100 * (sim[a, best] / published[a] - 1), 100 * (sim[b, best] / published[b] - 1), third, \
      100 * (sim[third, best] / published[third] - 1)
  }
}
