"""Zips a function app folder for deployment: every file under the folder, paths relative to
it, with its Unix mode kept (the handler must stay executable: Kudu and the Functions host read
the mode from the zip) and a fixed date, so the same folder always gives the same bytes.

    python3 zip_app.py FOLDER OUT.zip
"""

import os
import stat
import sys
import zipfile

FIXED_DATE = (1980, 1, 1, 0, 0, 0)


def main(folder: str, out: str) -> None:
    entries = []
    for parent, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(parent, name)
            entries.append((os.path.relpath(path, folder).replace(os.sep, "/"), path))
    tmp = out + ".tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name, path in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=FIXED_DATE)
            mode = stat.S_IMODE(os.stat(path).st_mode)
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.create_system = 3  # Unix, so the mode above is honoured
            info.compress_type = zipfile.ZIP_DEFLATED
            with open(path, "rb") as source:
                archive.writestr(info, source.read())
    os.replace(tmp, out)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: zip_app.py FOLDER OUT.zip")
    main(sys.argv[1], sys.argv[2])
