//! No module imports one that imports it back (issue 35): for every crate under `crates/`, the
//! graph of its top-level modules (an edge A -> B when code anywhere in A, its tests included,
//! names `crate::B`, or reaches B through `super::`) must have no cycle. Cargo keeps crates from
//! reaching up; this test does the same for the modules inside a crate, so that each layer of
//! the handler can be read without the ones above it.
//!
//! It reads the sources, not the compiler's resolution: it follows `mod x;` declarations from
//! the crate root (with `#[path]`), strips comments and literals, and collects every path that
//! starts with `crate::`, `super::` or (in the crate root) a module's own name. A name the crate
//! root re-exports (`crate::AppState`) counts as the module it comes from.
//!
//! To see the graph: `cargo test -p tablescan-handler --test module_cycles -- --nocapture`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Circles tolerated for now, each as its crate and the modules in it, only exactly so: a new
/// circle fails, and so does a listed one that grows, shrinks or is gone (then remove its line:
/// the list only shrinks). Issue 35 broke every circle found when this test was written (in the
/// handler, engine, storage, actions, ledger and CLI); none is left.
const KNOWN_CYCLES: &[(&str, &[&str])] = &[];

/// The root module of a crate, as a node of the graph (its re-exports and items of its own).
const ROOT: &str = "(root)";

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    /// `::`
    PathSep,
    Punct(char),
}

/// The tokens of a Rust source that matter for paths: identifiers, string literals (for
/// `#[path]`) and punctuation; comments, char literals, lifetimes and numbers are dropped.
fn tokens(source: &str) -> Vec<(Token, usize)> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            }
        } else if let Some((text, end)) = string_literal(&chars, i) {
            line += chars[i..end].iter().filter(|&&c| c == '\n').count();
            out.push((Token::Str(text), line));
            i = end;
        } else if c == '\'' {
            i = skip_char_or_lifetime(&chars, i);
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            out.push((Token::Ident(word.trim_start_matches("r#").to_owned()), line));
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
        } else if c == ':' && next == Some(':') {
            out.push((Token::PathSep, line));
            i += 2;
        } else {
            out.push((Token::Punct(c), line));
            i += 1;
        }
    }
    out
}

/// A string literal starting at `i` (plain, byte, raw with any number of `#`): its text (escapes
/// left as written) and the index after it; None if none starts there.
fn string_literal(chars: &[char], i: usize) -> Option<(String, usize)> {
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    let raw = chars.get(j) == Some(&'r');
    if raw {
        j += 1;
    }
    let hashes = chars[j..].iter().take_while(|&&c| c == '#').count();
    if (!raw && hashes > 0) || chars.get(j + hashes) != Some(&'"') {
        return None;
    }
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') && j > i {
        return None; // the tail of an identifier such as `xr"`, not a prefix
    }
    let start = j + hashes + 1;
    let mut k = start;
    while k < chars.len() {
        if !raw && chars[k] == '\\' {
            k += 2;
            continue;
        }
        if chars[k] == '"'
            && chars[k + 1..]
                .iter()
                .take(hashes)
                .filter(|&&c| c == '#')
                .count()
                == hashes
        {
            return Some((chars[start..k].iter().collect(), k + 1 + hashes));
        }
        k += 1;
    }
    Some((chars[start..].iter().collect(), chars.len()))
}

/// Skips a char literal (`'a'`, `'\n'`, `'\u{1F600}'`) or a lifetime or label (`'a`).
fn skip_char_or_lifetime(chars: &[char], i: usize) -> usize {
    if chars.get(i + 1) == Some(&'\\') {
        let mut k = i + 2;
        while k < chars.len() && chars[k] != '\'' {
            k += 1;
        }
        return k + 1;
    }
    if chars.get(i + 2) == Some(&'\'') {
        return i + 3;
    }
    let mut k = i + 1;
    while k < chars.len() && (chars[k].is_alphanumeric() || chars[k] == '_') {
        k += 1;
    }
    k
}

/// One source file of a crate: where it is and which module it is.
struct SourceFile {
    path: PathBuf,
    /// The module path within the crate (`["step", "run"]`); empty for the crate root.
    module: Vec<String>,
    /// True for lib.rs, main.rs and mod.rs: its child modules live in its own directory.
    owns_directory: bool,
}

/// A reference from one place to a top-level module of the crate.
struct Reference {
    /// The first segment after `crate::` (a module or a re-exported name).
    target: String,
    /// The top-level module it is made from.
    from: String,
    line: usize,
}

/// What one file declares and references.
#[derive(Default)]
struct FileFacts {
    /// `mod x;` declarations: (the module path of the child, its `#[path]` if any, the inline
    /// modules it is declared in).
    children: Vec<(Vec<String>, Option<String>, usize)>,
    references: Vec<Reference>,
    /// `pub use a::...::{Name}` of the crate root: Name -> a.
    reexports: Vec<(String, String)>,
}

fn ident(tokens: &[(Token, usize)], i: usize) -> Option<&str> {
    match tokens.get(i) {
        Some((Token::Ident(name), _)) => Some(name),
        _ => None,
    }
}

fn is(tokens: &[(Token, usize)], i: usize, token: &Token) -> bool {
    tokens.get(i).map(|(t, _)| t) == Some(token)
}

/// The first identifiers of the elements of a `{ ... }` group whose `{` is at `i`.
fn group_heads(tokens: &[(Token, usize)], i: usize) -> Vec<String> {
    let mut heads = Vec::new();
    let (mut depth, mut expecting_head) = (0, true);
    for (token, _) in &tokens[i..] {
        match token {
            Token::Punct('{') => {
                depth += 1;
                expecting_head = depth == 1;
                continue;
            }
            Token::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            Token::Punct(',') if depth == 1 => {
                expecting_head = true;
                continue;
            }
            Token::Ident(name) if depth == 1 && expecting_head => heads.push(name.clone()),
            _ => {}
        }
        expecting_head = false;
    }
    heads
}

/// The names a path starting at `i` (just after `crate::`, or after the last `super::`) leads to:
/// one identifier, or each head of a group.
fn path_heads(tokens: &[(Token, usize)], i: usize) -> Vec<String> {
    match tokens.get(i) {
        Some((Token::Ident(name), _)) => vec![name.clone()],
        Some((Token::Punct('{'), _)) => group_heads(tokens, i),
        _ => Vec::new(),
    }
}

/// Where a file's reading is: the inline modules open (each with the brace depth inside it),
/// the brace depth, a `#[path]` waiting for its `mod`, and whether a `use` is open.
#[derive(Default)]
struct Scope {
    inline: Vec<(String, usize)>,
    depth: usize,
    pending_path: Option<String>,
    in_use: bool,
}

impl Scope {
    /// Follows braces, `;`, `#[path]`, `use` and `mod` at `i` (a `mod x;` is recorded as a child
    /// of `current`); false for any other token.
    fn track(
        &mut self,
        tokens: &[(Token, usize)],
        i: usize,
        current: &[String],
        facts: &mut FileFacts,
    ) -> bool {
        match &tokens[i].0 {
            Token::Punct('{') => self.depth += 1,
            Token::Punct('}') => {
                if self.inline.last().map(|(_, d)| *d) == Some(self.depth) {
                    self.inline.pop();
                }
                self.depth -= 1;
            }
            Token::Punct(';') => {
                self.in_use = false;
                self.pending_path = None;
            }
            Token::Punct('#')
                if is(tokens, i + 1, &Token::Punct('['))
                    && ident(tokens, i + 2) == Some("path") =>
            {
                if let Some((Token::Str(path), _)) = tokens.get(i + 4) {
                    self.pending_path = Some(path.clone());
                }
            }
            Token::Ident(word) if word == "use" => self.in_use = true,
            Token::Ident(word)
                if word == "mod" && !is(tokens, i.wrapping_sub(1), &Token::PathSep) =>
            {
                match (ident(tokens, i + 1), tokens.get(i + 2).map(|(t, _)| t)) {
                    (Some(name), Some(Token::Punct(';'))) => {
                        let child = [current, &[name.to_owned()]].concat();
                        facts
                            .children
                            .push((child, self.pending_path.take(), self.inline.len()));
                    }
                    (Some(name), Some(Token::Punct('{'))) => {
                        self.inline.push((name.to_owned(), self.depth + 1));
                    }
                    _ => {}
                }
            }
            _ => return false,
        }
        true
    }
}

/// Reads one file: its `mod` declarations, inline modules, and references to modules.
fn read_file(file: &SourceFile, top_level: &BTreeSet<String>) -> FileFacts {
    let source =
        fs::read_to_string(&file.path).unwrap_or_else(|e| panic!("{}: {e}", file.path.display()));
    let tokens = tokens(&source);
    let mut facts = FileFacts::default();
    let mut scope = Scope::default();
    let mut i = 0;
    while i < tokens.len() {
        let current: Vec<String> = file
            .module
            .iter()
            .chain(scope.inline.iter().map(|(n, _)| n))
            .cloned()
            .collect();
        if scope.track(&tokens, i, &current, &mut facts) {
            i += 1;
            continue;
        }
        let from = current.first().cloned().unwrap_or_else(|| ROOT.to_owned());
        let at_root = current.is_empty();
        let line = tokens[i].1;
        let after_path_sep = is(&tokens, i.wrapping_sub(1), &Token::PathSep);
        match &tokens[i].0 {
            // `$crate::` in a macro is the macro's crate, not a module.
            Token::Ident(word)
                if word == "crate"
                    && is(&tokens, i + 1, &Token::PathSep)
                    && !is(&tokens, i.wrapping_sub(1), &Token::Punct('$')) =>
            {
                refer(&mut facts, path_heads(&tokens, i + 2), &from, line);
                if at_root && scope.in_use {
                    record_reexports(&tokens, i + 2, &mut facts.reexports);
                }
            }
            Token::Ident(word)
                if word == "super" && is(&tokens, i + 1, &Token::PathSep) && !after_path_sep =>
            {
                let (targets, next) = super_targets(&tokens, i, &current);
                refer(&mut facts, targets, &from, line);
                i = next;
                continue;
            }
            // In the crate root, `app::x` is `crate::app::x`.
            Token::Ident(word)
                if at_root
                    && top_level.contains(word)
                    && is(&tokens, i + 1, &Token::PathSep)
                    && !after_path_sep =>
            {
                refer(&mut facts, vec![word.clone()], &from, line);
                if scope.in_use {
                    record_reexports(&tokens, i, &mut facts.reexports);
                }
            }
            _ => {}
        }
        i += 1;
    }
    facts
}

/// Records references from top-level module `from` to each of `targets`.
fn refer(facts: &mut FileFacts, targets: Vec<String>, from: &str, line: usize) {
    for target in targets {
        let from = from.to_owned();
        facts.references.push(Reference { target, from, line });
    }
}

/// Where a `super::` chain at `i` leads from module `current`: the top-level module it stays
/// in, or (when it climbs to the crate root) the heads of the path after it; and the index of
/// the token after the chain.
fn super_targets(tokens: &[(Token, usize)], i: usize, current: &[String]) -> (Vec<String>, usize) {
    let mut ups = 0;
    let mut k = i;
    while ident(tokens, k) == Some("super") && is(tokens, k + 1, &Token::PathSep) {
        ups += 1;
        k += 2;
    }
    let base = &current[..current.len().saturating_sub(ups)];
    let targets = match base.first() {
        Some(top) => vec![top.clone()],
        None => path_heads(tokens, k),
    };
    (targets, k)
}

/// For a `use` path at `i` in the crate root (`app::{router, AppState}`), records each last name
/// it brings in as coming from the path's first module.
fn record_reexports(tokens: &[(Token, usize)], i: usize, out: &mut Vec<(String, String)>) {
    let Some(module) = ident(tokens, i) else {
        return;
    };
    let mut k = i;
    let mut last = None;
    while k < tokens.len() && !is(tokens, k, &Token::Punct(';')) {
        if let Some(name) = ident(tokens, k) {
            if name != "as" && name != "self" {
                last = Some(name.to_owned());
            }
        }
        if matches!(tokens[k].0, Token::Punct(',') | Token::Punct('}')) {
            if let Some(name) = last.take() {
                out.push((name, module.to_owned()));
            }
        }
        k += 1;
    }
    if let Some(name) = last {
        out.push((name, module.to_owned()));
    }
}

/// Where `mod name;` declared in `parent` lives.
fn child_file(
    parent: &SourceFile,
    child: &[String],
    path_attr: Option<&str>,
    inline_depth: usize,
) -> SourceFile {
    let directory = parent
        .path
        .parent()
        .expect("a source file is in a directory");
    let name = child.last().expect("a child module has a name");
    if let (Some(path), 0) = (path_attr, inline_depth) {
        let path = directory.join(path);
        let owns_directory = path.file_name().is_some_and(|f| f == "mod.rs");
        return SourceFile {
            path,
            module: child.to_vec(),
            owns_directory,
        };
    }
    let mut base = directory.to_path_buf();
    if !parent.owns_directory {
        base.push(parent.path.file_stem().expect("a source file has a name"));
    }
    for inline in &child[parent.module.len()..child.len() - 1] {
        base.push(inline);
    }
    let flat = base.join(format!("{name}.rs"));
    if flat.exists() {
        SourceFile {
            path: flat,
            module: child.to_vec(),
            owns_directory: false,
        }
    } else {
        SourceFile {
            path: base.join(name).join("mod.rs"),
            module: child.to_vec(),
            owns_directory: true,
        }
    }
}

/// A crate's top-level modules and the edges between them, each with one place that makes it.
struct ModuleGraph {
    nodes: BTreeSet<String>,
    edges: BTreeMap<String, BTreeMap<String, String>>,
}

fn module_graph(crate_dir: &Path) -> ModuleGraph {
    let src = crate_dir.join("src");
    let root_path = if src.join("lib.rs").exists() {
        src.join("lib.rs")
    } else {
        src.join("main.rs")
    };
    let root = SourceFile {
        path: root_path,
        module: Vec::new(),
        owns_directory: true,
    };
    // The crate root's own `mod` declarations first: a bare `app::` in the root means crate::app.
    let top_level: BTreeSet<String> = read_file(&root, &BTreeSet::new())
        .children
        .iter()
        .map(|(module, _, _)| module[0].clone())
        .collect();
    let mut nodes = top_level.clone();
    nodes.insert(ROOT.to_owned());
    let mut references = Vec::new();
    let mut reexports = BTreeMap::new();
    let mut queue = vec![root];
    while let Some(file) = queue.pop() {
        let facts = read_file(&file, &top_level);
        for (child, path, depth) in &facts.children {
            queue.push(child_file(&file, child, path.as_deref(), *depth));
        }
        for reference in facts.references {
            nodes.insert(reference.from.clone());
            references.push((
                file.path
                    .strip_prefix(crate_dir)
                    .unwrap_or(&file.path)
                    .display()
                    .to_string(),
                reference,
            ));
        }
        if file.module.is_empty() {
            reexports.extend(facts.reexports);
        }
    }
    let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (path, reference) in references {
        let to = if top_level.contains(&reference.target) {
            reference.target.clone()
        } else {
            reexports
                .get(&reference.target)
                .cloned()
                .unwrap_or_else(|| ROOT.to_owned())
        };
        if to != reference.from {
            let place = format!("{path}:{} (`{}`)", reference.line, reference.target);
            edges
                .entry(reference.from)
                .or_default()
                .entry(to)
                .or_insert(place);
        }
    }
    ModuleGraph { nodes, edges }
}

/// The strongly connected components of more than one module (Tarjan's algorithm).
fn cycles(graph: &ModuleGraph) -> Vec<Vec<String>> {
    struct Walk<'a> {
        graph: &'a ModuleGraph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(walk: &mut Walk<'a>, node: &'a str) {
        let n = walk.index.len();
        walk.index.insert(node, n);
        walk.low.insert(node, n);
        walk.stack.push(node);
        let graph = walk.graph;
        for next in graph.edges.get(node).into_iter().flat_map(|e| e.keys()) {
            if !walk.index.contains_key(next.as_str()) {
                visit(walk, next);
                let low = walk.low[node].min(walk.low[next.as_str()]);
                walk.low.insert(node, low);
            } else if walk.stack.contains(&next.as_str()) {
                let low = walk.low[node].min(walk.index[next.as_str()]);
                walk.low.insert(node, low);
            }
        }
        if walk.low[node] == walk.index[node] {
            let mut component = Vec::new();
            while let Some(top) = walk.stack.pop() {
                component.push(top.to_owned());
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                walk.found.push(component);
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for node in &graph.nodes {
        if !walk.index.contains_key(node.as_str()) {
            visit(&mut walk, node);
        }
    }
    walk.found
}

/// The graph and its cycles, as the test prints them.
fn describe(name: &str, graph: &ModuleGraph, found: &[Vec<String>]) -> String {
    let mut out = format!("== {name}\n");
    for node in &graph.nodes {
        let uses: Vec<&str> = graph
            .edges
            .get(node)
            .into_iter()
            .flat_map(|e| e.keys())
            .map(String::as_str)
            .collect();
        out += &format!("  {node} -> {}\n", uses.join(", "));
    }
    for component in found {
        out += &format!("  CYCLE: {}\n", component.join(", "));
        for from in component {
            for (to, place) in graph.edges.get(from).into_iter().flatten() {
                if component.contains(to) {
                    out += &format!("    {from} -> {to}: {place}\n");
                }
            }
        }
    }
    out
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut dirs: Vec<PathBuf> = fs::read_dir(&crates)
        .expect("crates/ is readable")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|dir| dir.join("Cargo.toml").exists())
        .collect();
    dirs.sort();
    assert!(
        dirs.len() >= 8,
        "expected the workspace's crates under {}",
        crates.display()
    );
    let (mut report, mut new, mut seen) = (String::new(), Vec::new(), Vec::new());
    for dir in &dirs {
        let name = dir
            .file_name()
            .expect("a crate directory has a name")
            .to_string_lossy()
            .to_string();
        let graph = module_graph(dir);
        let found = cycles(&graph);
        report += &describe(&name, &graph, &found);
        for component in found {
            let known = KNOWN_CYCLES
                .iter()
                .position(|(krate, modules)| *krate == name && *modules == component);
            match known {
                Some(index) => seen.push(index),
                None => new.push(format!("{name}: {}", component.join(", "))),
            }
        }
    }
    println!("{report}");
    assert!(
        new.is_empty(),
        "modules that import each other in a circle (break it: a module that both use, or \
         what the lower one needs passed in):\n  {}\n\n{report}",
        new.join("\n  ")
    );
    let gone: Vec<String> = (0..KNOWN_CYCLES.len())
        .filter(|index| !seen.contains(index))
        .map(|index| {
            format!(
                "{}: {}",
                KNOWN_CYCLES[index].0,
                KNOWN_CYCLES[index].1.join(", ")
            )
        })
        .collect();
    assert!(
        gone.is_empty(),
        "these circles of KNOWN_CYCLES are broken now (remove them from it):\n  {}",
        gone.join("\n  ")
    );
}

#[test]
fn finds_a_cycle_through_super_and_a_group() {
    let dir = std::env::temp_dir().join(format!("module-cycles-{}", std::process::id()));
    let src = dir.join("src");
    fs::create_dir_all(src.join("b")).unwrap();
    fs::write(
        src.join("lib.rs"),
        "mod a;\nmod b;\nmod c;\npub use a::Thing;\n",
    )
    .unwrap();
    fs::write(
        src.join("a.rs"),
        "// crate::c is only a comment\nuse crate::{b::x, c};\npub struct Thing;\n",
    )
    .unwrap();
    fs::write(src.join("b").join("mod.rs"), "mod x;\n").unwrap();
    fs::write(
        src.join("b").join("x.rs"),
        "fn f() -> super::super::Thing { let _ = \"crate::c\"; todo!() }\n",
    )
    .unwrap();
    fs::write(
        src.join("c.rs"),
        "#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
    )
    .unwrap();
    let graph = module_graph(&dir);
    let found = cycles(&graph);
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        found,
        vec![vec!["a".to_owned(), "b".to_owned()]],
        "{}",
        describe("t", &graph, &found)
    );
    assert!(graph.edges["a"].contains_key("c"));
    assert!(
        !graph.edges.contains_key("c"),
        "c's tests use only c itself"
    );
}
