//! The deployment package of `scripts/package`: unpacked, it holds exactly host.json, the
//! executable `handler` and one folder per function; the handler is an x86-64 Linux binary
//! that needs nothing newer than glibc 2.28 (Debian bullseye has 2.31, bookworm 2.36); and
//! devhost, run over the unpacked folder as the Functions host runs over a deployed app,
//! completes a scan with it.
//!
//! scripts/test builds the package first and passes its path in TABLESCAN_PACKAGE; without
//! it, this test runs scripts/package itself (a release build: minutes).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use serde_json::{json, Value};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn package() -> PathBuf {
    if let Ok(path) = std::env::var("TABLESCAN_PACKAGE") {
        return PathBuf::from(path);
    }
    let output = Command::new(repo_root().join("scripts/package"))
        .output()
        .expect("scripts/package runs");
    assert!(
        output.status.success(),
        "scripts/package failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())
}

/// Every entry of the zip with its Unix mode, and the zip unpacked into `dest` with those
/// modes, as the platform unpacks or mounts a package. Python's zipfile reads the archive:
/// python3 is one of the project's three prerequisites.
fn unpack(zip: &Path, dest: &Path) -> BTreeMap<String, u32> {
    let script = r#"
import json, os, sys, zipfile
entries = {}
with zipfile.ZipFile(sys.argv[1]) as archive:
    for info in archive.infolist():
        mode = (info.external_attr >> 16) & 0o7777
        entries[info.filename] = mode
        path = archive.extract(info, sys.argv[2])
        os.chmod(path, mode)
print(json.dumps(entries))
"#;
    let output = Command::new("python3")
        .args(["-c", script])
        .arg(zip)
        .arg(dest)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(bytes[at..at + 2].try_into().unwrap())
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

fn u64_at(bytes: &[u8], at: usize) -> usize {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize
}

/// The symbol versions an ELF64 little-endian executable needs, from its `.gnu.version_r`
/// section (version needs), by library: what the dynamic loader checks against the system's
/// libraries at start.
fn version_needs(elf: &[u8]) -> BTreeMap<String, Vec<String>> {
    assert_eq!(&elf[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(elf[4], 2, "not 64-bit");
    assert_eq!(elf[5], 1, "not little-endian");
    assert_eq!(u16_at(elf, 18), 62, "not x86-64");
    let (shoff, shentsize, shnum) = (
        u64_at(elf, 40),
        u16_at(elf, 58) as usize,
        u16_at(elf, 60) as usize,
    );
    let section = |i: usize| {
        let at = shoff + i * shentsize;
        // (type, offset, size, link)
        (
            u32_at(elf, at + 4),
            u64_at(elf, at + 24),
            u64_at(elf, at + 32),
            u32_at(elf, at + 40) as usize,
        )
    };
    const SHT_GNU_VERNEED: u32 = 0x6fff_fffe;
    let (_, offset, _, link) = (0..shnum)
        .map(section)
        .find(|(kind, ..)| *kind == SHT_GNU_VERNEED)
        .expect("a dynamically linked executable has version needs");
    let strings = section(link).1;
    let string = |at: usize| {
        let start = strings + at;
        let end = start + elf[start..].iter().position(|b| *b == 0).unwrap();
        String::from_utf8_lossy(&elf[start..end]).into_owned()
    };
    let mut needs = BTreeMap::new();
    let mut entry = offset;
    loop {
        let count = u16_at(elf, entry + 2) as usize;
        let file = string(u32_at(elf, entry + 4) as usize);
        let mut aux = entry + u32_at(elf, entry + 8) as usize;
        let mut versions = Vec::new();
        for _ in 0..count {
            versions.push(string(u32_at(elf, aux + 8) as usize));
            aux += u32_at(elf, aux + 12) as usize;
        }
        needs.insert(file, versions);
        match u32_at(elf, entry + 12) {
            0 => break,
            next => entry += next as usize,
        }
    }
    needs
}

/// `GLIBC_2.28` as (2, 28).
fn glibc_version(name: &str) -> Option<(u32, u32)> {
    let (major, minor) = name.strip_prefix("GLIBC_")?.split_once('.')?;
    Some((major.parse().ok()?, minor.split('.').next()?.parse().ok()?))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_package_unpacks_to_a_working_app_that_runs_on_bullseye_and_bookworm() {
    let zip = package();
    let dir = std::env::temp_dir().join(unique("package-"));
    std::fs::create_dir_all(&dir).unwrap();
    let entries = unpack(&zip, &dir);

    // Exactly the layout the host expects, and nothing else.
    let mut expected: Vec<String> = vec!["handler".into(), "host.json".into()];
    for function in std::fs::read_dir(repo_root().join("function_app"))
        .unwrap()
        .flatten()
    {
        if function.path().join("function.json").is_file() {
            expected.push(format!(
                "{}/function.json",
                function.file_name().to_string_lossy()
            ));
        }
    }
    expected.sort();
    assert_eq!(entries.keys().cloned().collect::<Vec<_>>(), expected);
    assert_eq!(
        entries["handler"] & 0o111,
        0o111,
        "the handler is executable by everyone"
    );
    for (name, mode) in &entries {
        assert_eq!(mode & 0o022, 0, "{name} is writable by group or others");
    }
    let host_json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("host.json")).unwrap()).unwrap();
    assert_eq!(
        host_json["customHandler"]["description"]["defaultExecutablePath"],
        "handler"
    );

    // glibc 2.28 at most, and only the libraries every Debian image has.
    let needs = version_needs(&std::fs::read(dir.join("handler")).unwrap());
    let newest = needs
        .values()
        .flatten()
        .filter_map(|v| glibc_version(v))
        .max()
        .expect("the handler needs glibc symbols");
    assert!(
        newest <= (2, 28),
        "needs GLIBC_{}.{}: {needs:?}",
        newest.0,
        newest.1
    );
    for library in needs.keys() {
        assert!(
            [
                "libc.so.6",
                "libm.so.6",
                "libpthread.so.0",
                "libdl.so.2",
                "ld-linux-x86-64.so.2",
                "libgcc_s.so.1",
                "librt.so.1"
            ]
            .contains(&library.as_str()),
            "needs {library}, which a Functions image may not have"
        );
    }

    // devhost over the unpacked folder, as the host over a deployed app.
    let rows = rows();
    let source = table_with(&rows).await;
    let host = Host::start_app(dir, 1, &[]);
    let done = host
        .run(json!({ "table": source.name(), "action": {"type": "count"} }))
        .await;
    assert_eq!(done["state"], "succeeded", "{done}\n{}", host.log());
    assert_eq!(done["result"]["rows"], rows.len() as u64);
}

/// The check above can fail: the handler cargo builds natively on this machine (Debian
/// bookworm, glibc 2.36) needs symbols newer than 2.28, and the reader finds them.
#[test]
fn a_handler_linked_against_this_machines_glibc_is_caught() {
    let needs = version_needs(&std::fs::read(handler_binary()).unwrap());
    let newest = needs
        .values()
        .flatten()
        .filter_map(|v| glibc_version(v))
        .max()
        .unwrap();
    assert!(newest > (2, 28), "{needs:?}");
}
