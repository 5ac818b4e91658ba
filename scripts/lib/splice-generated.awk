# Replaces what stands between `<!-- KIND:NAME -->` and `<!-- /KIND:NAME -->` in a document with
# the file DIR/NAME.md (given as -v dir=... -v kind=...; kind `simulated` for scripts/simulate's
# tables, `bench` for scripts/bench's). Lines outside the markers are kept as they are; a marker
# whose file is missing keeps its old content.
BEGIN {
  if (kind == "") kind = "simulated"
  open = "<!-- " kind ":[a-z0-9_-]+ -->"
}
{
  if (match($0, open)) {
    name = substr($0, RSTART + length(kind) + 6, RLENGTH - length(kind) - 10)
    print
    file = dir "/" name ".md"
    if ((getline line < file) > 0) {
      print line
      while ((getline line < file) > 0) print line
      close(file)
      skipping = name
    }
    next
  }
  if (skipping != "" && index($0, "<!-- /" kind ":" skipping " -->")) {
    skipping = ""
    print
    next
  }
  if (skipping == "") print
}
