# Replaces what stands between `<!-- KIND:NAME -->` and `<!-- /KIND:NAME -->` (each a line of its
# own) in a document with the file DIR/NAME.md (given as -v dir=... -v kind=...; kind `simulated`
# for scripts/simulate's tables, `bench` for scripts/bench's). Lines outside the markers are kept
# as they are; a marker whose file is missing keeps its old content. An opening marker without
# its closing one fails the run (exit 1, naming it) rather than drop the rest of the document.
BEGIN {
  if (kind == "") kind = "simulated"
  open = "^<!-- " kind ":[a-z0-9_-]+ -->$"
}
{
  if (match($0, open)) {
    name = substr($0, length(kind) + 7, length($0) - length(kind) - 10)
    print
    opened = name
    file = dir "/" name ".md"
    if ((getline line < file) > 0) {
      print line
      while ((getline line < file) > 0) print line
      close(file)
      skipping = name
    }
    next
  }
  if (opened != "" && $0 == "<!-- /" kind ":" opened " -->") {
    opened = ""
    skipping = ""
    print
    next
  }
  if (skipping == "") print
}
END {
  if (opened != "") {
    printf "splice-generated.awk: <!-- %s:%s --> has no closing <!-- /%s:%s -->\n", kind, opened, kind, opened > "/dev/stderr"
    exit 1
  }
}
