# Replaces what stands between `<!-- simulated:NAME -->` and `<!-- /simulated:NAME -->` in a
# document with the file DIR/NAME.md (DIR given as -v dir=...). Lines outside the markers are
# kept as they are; a marker whose file is missing keeps its old content.
{
  if (match($0, /<!-- simulated:[a-z0-9-]+ -->/)) {
    name = substr($0, RSTART + 15, RLENGTH - 19)
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
  if (skipping != "" && index($0, "<!-- /simulated:" skipping " -->")) {
    skipping = ""
    print
    next
  }
  if (skipping == "") print
}
