//! Annotation files: cgfast's JSON format (plain or gzipped) and PyTorch's pickles.
//!
//! ```json
//! {"format": "cgfast-annotations", "version": 1,
//!  "annotations": {"8589934592": [{"name": "attention"}, "block 0"]},
//!  "graphs": {"2": {"names": ["_Z6kernelPf"],
//!                   "nodes": [[0, 0, 0, [], [1, 1, 1], [32, 1, 1]]]}}}
//! ```
//! A node of `graphs` is `[local_id, kind, name_index, dep_local_ids, grid, block]`
//! with kind 0 = kernel, 1 = memcpy, 2 = memset; `name_index` is -1 and `grid`/`block`
//! are null where the node has none. An optional `"stacks": {"8589934592":
//! ["model.py:10:forward", "train.py:3:step"]}` gives nodes' launch frames, innermost first;
//! an optional `"launch_phases": {"8589934593": "backward"}` the nodes whose frames are
//! those of the forward op whose gradient they compute;
//! an optional `"traces": ["/runs/a/worker0.1.pt.trace.json.gz"]` the traces the recording
//! process exported.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::annotations::value::Value;
use crate::annotations::{Annotations, GraphNode, Item, NodeKind};
use crate::index::NodeId;
use crate::json::value as json_value;
use crate::read::input::is_gzip_path;
use crate::write::atomic_file::AtomicFile;
use crate::Error;

pub(crate) const FORMAT: &str = "cgfast-annotations";
pub(crate) const VERSION: i128 = 1;

/// Read an annotation file; the error is one line naming the file.
pub fn read(path: &Path) -> Result<Annotations, Error> {
    let bytes = crate::read::input::read_all(path).map_err(|e| Error::read(path, e))?;
    let in_file = |e: Error| in_file(path, e);
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace()).copied();
    let document = match first {
        None => return Err(in_file(invalid("the annotation file is empty".into()))),
        Some(b'{') => json_value::parse(&bytes).map_err(|(at, expected)| {
            in_file(invalid(format!("not valid JSON: expected {expected} at byte {at}")))
        })?,
        Some(_) if looks_like_pickle(&bytes) => crate::annotations::pickle::load(&bytes).map_err(in_file)?,
        Some(_) => {
            return Err(in_file(invalid(
                "not an annotation file: expected a JSON object of node id -> annotations, or a pickle"
                    .into(),
            )))
        }
    };
    let mut annotations = from_document(document).map_err(in_file)?;
    annotations.source = Some(path.to_path_buf());
    Ok(annotations)
}

/// The traces an annotation file lists (`"traces"`), to pair them with it: none where
/// it lists none, or is no cgfast annotation file that parses (reading its annotations
/// says why, where they are used); an error naming the file where its `"traces"` is
/// malformed.
pub(crate) fn read_traces(path: &Path) -> Result<Vec<PathBuf>, Error> {
    let Ok(bytes) = crate::read::input::read_all(path) else { return Ok(Vec::new()) };
    let Ok(Value::Dict(entries)) = json_value::parse(&bytes) else { return Ok(Vec::new()) };
    if !entries.iter().any(|(k, v)| k.as_str() == Some("format") && v.as_str() == Some(FORMAT)) {
        return Ok(Vec::new());
    }
    match entries.into_iter().find(|(key, _)| key.as_str() == Some("traces")) {
        Some((_, listed)) => traces(listed).map_err(|e| in_file(path, e)),
        None => Ok(Vec::new()),
    }
}

/// An error about an annotation file, naming it.
fn in_file(path: &Path, e: Error) -> Error {
    match e {
        Error::Annotations { path: None, message } => Error::annotations(Some(path), message),
        other => other,
    }
}

/// What is wrong with an annotation file (whose path the caller adds).
type Decoded<T> = Result<T, Error>;

fn invalid(message: String) -> Error {
    Error::annotations(None, message)
}

/// How a pickle of a mapping starts: PROTO (protocol 2+), or in protocols 0 and 1 a
/// dict's MARK or EMPTY_DICT, or a defaultdict's GLOBAL `c<module>\n`.
fn looks_like_pickle(bytes: &[u8]) -> bool {
    match bytes.first() {
        Some(0x80 | b'(' | b'}') => true,
        Some(b'c') => {
            let module = bytes[1..].iter().position(|&b| b == b'\n').map(|end| &bytes[1..1 + end]);
            module.is_some_and(|m| {
                !m.is_empty() && m.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
            })
        }
        _ => false,
    }
}

fn from_document(document: Value) -> Decoded<Annotations> {
    let Value::Dict(entries) = document else {
        return Err(invalid("expected a mapping of node ids to annotation lists".into()));
    };
    let is_cgfast = entries.iter().any(|(k, v)| k.as_str() == Some("format") && v.as_str() == Some(FORMAT));
    if !is_cgfast {
        return Ok(Annotations { nodes: node_map(entries)?, ..Default::default() });
    }
    let mut out = Annotations::default();
    for (key, value) in entries {
        match key.as_str() {
            Some("version") => match value {
                Value::Int(v) if v <= VERSION => {}
                other => return Err(invalid(format!("unsupported {FORMAT} version {}", other.py_str()))),
            },
            Some("annotations") => match value {
                Value::Dict(nodes) => out.nodes = node_map(nodes)?,
                _ => return Err(invalid("\"annotations\" is not an object".into())),
            },
            Some("graphs") => out.graphs = graphs(value)?,
            Some("stacks") => out.stacks = stacks(value)?,
            Some("launch_phases") => out.launch_phases = launch_phases(value)?,
            Some("traces") => out.traces = traces(value)?,
            _ => {}
        }
    }
    Ok(out)
}

fn node_map(entries: Vec<(Value, Value)>) -> Decoded<HashMap<NodeId, Vec<Item>>> {
    let mut nodes = HashMap::with_capacity_and_hasher(entries.len(), Default::default());
    for (key, items) in entries {
        let node = match &key {
            Value::Int(i) => Some(*i),
            Value::Str(s) => s.trim().parse::<NodeId>().ok(),
            _ => None,
        }
        .ok_or_else(|| invalid(format!("key {} is not a node id (an integer)", key_text(&key))))?;
        let items = match items {
            Value::List(items) | Value::Tuple(items) => items.into_iter().map(Item::from_value).collect(),
            other => {
                return Err(invalid(format!(
                    "node {node}: expected a list of annotations, found {}",
                    other.py_str()
                )))
            }
        };
        nodes.insert(node, items);
    }
    Ok(nodes)
}

fn stacks(value: Value) -> Decoded<HashMap<NodeId, Vec<String>>> {
    let Value::Dict(entries) = value else {
        return Err(invalid("\"stacks\" is not an object".into()));
    };
    let mut out = HashMap::with_capacity_and_hasher(entries.len(), Default::default());
    for (key, frames) in entries {
        let node = key.as_str().and_then(|s| s.trim().parse::<NodeId>().ok()).ok_or_else(|| {
            invalid(format!("stacks: key {} is not a node id (an integer)", key_text(&key)))
        })?;
        let frames = match frames {
            Value::List(frames) => frames
                .into_iter()
                .map(|f| match f {
                    Value::Str(f) => Ok(f),
                    other => Err(invalid(format!(
                        "stacks: node {node}: a frame is {}, not a string",
                        other.py_str()
                    ))),
                })
                .collect::<Decoded<Vec<String>>>()?,
            other => {
                return Err(invalid(format!(
                    "stacks: node {node}: expected a list of frames, found {}",
                    other.py_str()
                )))
            }
        };
        out.insert(node, frames);
    }
    Ok(out)
}

fn launch_phases(value: Value) -> Decoded<HashMap<NodeId, String>> {
    let Value::Dict(entries) = value else {
        return Err(invalid("\"launch_phases\" is not an object".into()));
    };
    let mut out = HashMap::with_capacity_and_hasher(entries.len(), Default::default());
    for (key, phase) in entries {
        let node = key.as_str().and_then(|s| s.trim().parse::<NodeId>().ok()).ok_or_else(|| {
            invalid(format!("launch_phases: key {} is not a node id (an integer)", key_text(&key)))
        })?;
        match phase {
            Value::Str(phase) => out.insert(node, phase),
            other => {
                return Err(invalid(format!(
                    "launch_phases: node {node}: {} is not a string",
                    other.py_str()
                )))
            }
        };
    }
    Ok(out)
}

fn traces(value: Value) -> Decoded<Vec<PathBuf>> {
    let Value::List(paths) = value else {
        return Err(invalid(format!("\"traces\" is {}, not a list of paths", key_text(&value))));
    };
    paths
        .into_iter()
        .map(|path| match path {
            Value::Str(path) if !path.is_empty() => Ok(PathBuf::from(path)),
            other => Err(invalid(format!("traces: an item is {}, not a path", key_text(&other)))),
        })
        .collect()
}

fn key_text(key: &Value) -> String {
    match key {
        Value::Str(s) => format!("{s:?}"),
        other => other.py_str(),
    }
}

fn graphs(value: Value) -> Decoded<BTreeMap<u32, Vec<GraphNode>>> {
    let Value::Dict(entries) = value else {
        return Err(invalid("\"graphs\" is not an object".into()));
    };
    let mut out = BTreeMap::new();
    for (key, graph) in entries {
        let exec_id: u32 = key
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| invalid(format!("graph key {} is not a graph id", key_text(&key))))?;
        let bad = |what: &str| invalid(format!("graph {exec_id}: {what}"));
        let Value::Dict(fields) = graph else {
            return Err(bad("expected an object with \"names\" and \"nodes\""));
        };
        let mut names = Vec::new();
        let mut nodes = Vec::new();
        for (k, v) in fields {
            match (k.as_str(), v) {
                (Some("names"), Value::List(list)) => {
                    names = list
                        .into_iter()
                        .map(|n| n.as_str().map(str::to_string).ok_or_else(|| bad("a name is not a string")))
                        .collect::<Result<_, _>>()?
                }
                (Some("nodes"), Value::List(list)) => nodes = list,
                (Some("names" | "nodes"), _) => return Err(bad("\"names\" and \"nodes\" must be lists")),
                _ => {}
            }
        }
        let base = (exec_id as i64) << 32;
        let decoded = nodes
            .into_iter()
            .map(|node| {
                decode_node(node, base, &names)
                    .ok_or_else(|| bad("a node is not [local_id, kind, name_index, deps, grid, block]"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        out.insert(exec_id, decoded);
    }
    Ok(out)
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => i64::try_from(*i).ok(),
        _ => None,
    }
}

fn dims(v: &Value) -> Option<Option<[u32; 3]>> {
    match v {
        Value::None => Some(None),
        Value::List(xs) if xs.len() == 3 => {
            let mut d = [0u32; 3];
            for (slot, x) in d.iter_mut().zip(xs) {
                *slot = u32::try_from(int(x)?).ok()?;
            }
            Some(Some(d))
        }
        _ => None,
    }
}

fn decode_node(node: Value, base: i64, names: &[String]) -> Option<GraphNode> {
    let Value::List(fields) = node else { return None };
    if fields.len() != 6 {
        return None;
    }
    let local = int(&fields[0])?;
    let kind = NodeKind::from_code(u64::try_from(int(&fields[1])?).ok()?)?;
    let name = match int(&fields[2])? {
        -1 => None,
        i => Some(names.get(usize::try_from(i).ok()?)?.clone()),
    };
    let Value::List(deps) = &fields[3] else { return None };
    let deps = deps.iter().map(|d| int(d).map(|l| base | l)).collect::<Option<Vec<_>>>()?;
    Some(GraphNode { id: base | local, kind, name, deps, grid: dims(&fields[4])?, block: dims(&fields[5])? })
}

/// Write `annotations` atomically in cgfast's JSON format (gzipped for `.gz`).
pub fn write(path: &Path, annotations: &Annotations) -> Result<(), Error> {
    let text = to_json(annotations).map_err(|e| in_file(path, e))?;
    let file = AtomicFile::create(path).map_err(|e| Error::write(path, e))?;
    let result = if is_gzip_path(path) {
        let mut gz = flate2::write::GzEncoder::new(file.file(), flate2::Compression::new(6));
        gz.write_all(text.as_bytes()).and_then(|_| gz.finish().map(|_| ()))
    } else {
        let mut f = file.file();
        f.write_all(text.as_bytes())
    };
    result.and_then(|_| file.commit()).map_err(|e| Error::write(path, e))
}

pub(crate) fn to_json(annotations: &Annotations) -> Decoded<String> {
    let mut out = String::new();
    out.push_str(&format!("{{\"format\": \"{FORMAT}\", \"version\": {VERSION}, \"annotations\": {{"));
    let mut ids: Vec<&NodeId> = annotations.nodes.keys().collect();
    ids.sort_unstable();
    for (i, id) in ids.into_iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&format!("\"{id}\": "));
        let items = Value::List(annotations.nodes[id].iter().map(Item::to_value).collect());
        json_value::write(&items, &mut out);
    }
    out.push('}');
    if !annotations.graphs.is_empty() {
        out.push_str(", \"graphs\": {");
        for (i, (exec_id, nodes)) in annotations.graphs.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(&format!("\"{exec_id}\": "));
            out.push_str(&graph_json(*exec_id, nodes)?);
        }
        out.push('}');
    }
    if !annotations.stacks.is_empty() {
        out.push_str(", \"stacks\": {");
        let mut ids: Vec<&NodeId> = annotations.stacks.keys().collect();
        ids.sort_unstable();
        for (i, id) in ids.into_iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(&format!("\"{id}\": "));
            let frames = Value::List(annotations.stacks[id].iter().map(|f| Value::Str(f.clone())).collect());
            json_value::write(&frames, &mut out);
        }
        out.push('}');
    }
    if !annotations.launch_phases.is_empty() {
        out.push_str(", \"launch_phases\": {");
        let mut ids: Vec<&NodeId> = annotations.launch_phases.keys().collect();
        ids.sort_unstable();
        for (i, id) in ids.into_iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(&format!("\"{id}\": "));
            json_value::write(&Value::Str(annotations.launch_phases[id].clone()), &mut out);
        }
        out.push('}');
    }
    if !annotations.traces.is_empty() {
        let paths = annotations
            .traces
            .iter()
            .map(|path| {
                path.to_str().map(|p| Value::Str(p.into())).ok_or_else(|| {
                    invalid(format!("traces: {} is not valid UTF-8, which JSON cannot hold", path.display()))
                })
            })
            .collect::<Decoded<Vec<Value>>>()?;
        out.push_str(", \"traces\": ");
        json_value::write(&Value::List(paths), &mut out);
    }
    out.push_str("}\n");
    Ok(out)
}

fn graph_json(exec_id: u32, nodes: &[GraphNode]) -> Decoded<String> {
    let local = |id: i64| {
        if id >> 32 == exec_id as i64 {
            Ok(id & 0xffff_ffff)
        } else {
            Err(invalid(format!("graph {exec_id}: node {id} belongs to another graph")))
        }
    };
    let mut names: Vec<&str> = Vec::new();
    let mut name_ids: HashMap<&str, usize> = HashMap::default();
    let mut rows = Vec::with_capacity(nodes.len());
    let dims = |d: &Option<[u32; 3]>| d.map_or("null".to_string(), |[x, y, z]| format!("[{x}, {y}, {z}]"));
    for node in nodes {
        let name_index = match node.name.as_deref() {
            None => -1,
            Some(n) => *name_ids.entry(n).or_insert_with(|| {
                names.push(n);
                names.len() - 1
            }) as i64,
        };
        let deps =
            node.deps.iter().map(|&d| local(d).map(|l| l.to_string())).collect::<Result<Vec<_>, _>>()?;
        rows.push(format!(
            "[{}, {}, {}, [{}], {}, {}]",
            local(node.id)?,
            node.kind.code(),
            name_index,
            deps.join(", "),
            dims(&node.grid),
            dims(&node.block)
        ));
    }
    let names: Vec<String> = names.iter().map(|n| crate::json::quote(n)).collect();
    Ok(format!("{{\"names\": [{}], \"nodes\": [{}]}}", names.join(", "), rows.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Annotations {
        let mut a = Annotations::default();
        a.nodes.insert(
            (2 << 32) | 1,
            vec![
                Item::Dict(vec![("name".into(), Value::Str("mlp".into()))]),
                Item::Other(Value::Str("outer".into())),
            ],
        );
        a.graphs.insert(
            2,
            vec![
                GraphNode {
                    id: 2 << 32,
                    kind: NodeKind::Kernel,
                    name: Some("_Z1kPf".into()),
                    deps: vec![],
                    grid: Some([4, 1, 1]),
                    block: Some([128, 1, 1]),
                },
                GraphNode {
                    id: (2 << 32) | 1,
                    kind: NodeKind::Memset,
                    name: None,
                    deps: vec![2 << 32],
                    grid: None,
                    block: None,
                },
                GraphNode {
                    id: (2 << 32) | 2,
                    kind: NodeKind::Kernel,
                    name: Some("_Z1kPf".into()),
                    deps: vec![2 << 32],
                    grid: Some([4, 1, 1]),
                    block: Some([128, 1, 1]),
                },
            ],
        );
        a
    }

    fn read_bytes(bytes: &[u8]) -> Result<Annotations, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = dir.path().join("a.ann");
        std::fs::write(&path, bytes).map_err(|e| e.to_string())?;
        read(&path).map_err(|e| e.to_string())
    }

    #[test]
    fn other_files_are_named_as_such_and_real_pickles_read() {
        for bytes in [&b"[1, 2]"[..], b"\"text\"", b"42", b"null", b"hello, world\n", b"ccc", b"\xff\xfe"] {
            let message = read_bytes(bytes).unwrap_err();
            assert!(message.ends_with("a.ann: not an annotation file: expected a JSON object of node id -> annotations, or a pickle"), "{message}");
        }
        // {5: ['x']} in pickle protocols 0 and 1, and a protocol 0 defaultdict
        let pickles: [&[u8]; 3] = [
            b"(dp0\nI5\n(lp1\nVx\np2\nas.",
            b"}q\x00K\x05]q\x01X\x01\x00\x00\x00xq\x02as.",
            b"ccollections\ndefaultdict\np0\n(c__builtin__\nlist\np1\ntp2\nRp3\nI5\n(lp4\nVx\np5\nas.",
        ];
        for bytes in pickles {
            let a = read_bytes(bytes).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(a.nodes.len(), 1, "{bytes:?}");
        }
        assert!(
            !read_bytes(b"\x80\x04K\x05.").unwrap_err().contains("not an annotation file"),
            "a real pickle keeps its own error"
        );
    }

    #[test]
    fn json_round_trip_interns_names() {
        let a = sample();
        let text = to_json(&a).unwrap();
        assert_eq!(text.matches("_Z1kPf").count(), 1);
        let b = from_document(json_value::parse(text.as_bytes()).unwrap()).unwrap();
        assert_eq!(b.nodes, a.nodes);
        assert_eq!(b.graphs, a.graphs);
    }

    #[test]
    fn stacks_round_trip_and_bad_ones_are_refused() {
        let mut a = sample();
        a.stacks.insert(8589934592, vec!["model.py:10:forward".into(), "train.py:3:step".into()]);
        let text = to_json(&a).unwrap();
        assert!(text.contains("\"stacks\": {\"8589934592\": [\"model.py:10:forward\", \"train.py:3:step\"]}"));
        let b = read_bytes(text.as_bytes()).unwrap();
        assert_eq!(b.stacks, a.stacks);
        assert!(!to_json(&sample()).unwrap().contains("stacks"));
        let bad =
            br#"{"format": "cgfast-annotations", "version": 1, "annotations": {}, "stacks": {"x": []}}"#;
        assert!(read_bytes(bad).unwrap_err().contains("stacks: key"));
        let bad =
            br#"{"format": "cgfast-annotations", "version": 1, "annotations": {}, "stacks": {"1": [3]}}"#;
        assert!(read_bytes(bad).unwrap_err().contains("not a string"));
    }

    #[test]
    fn launch_phases_round_trip_and_bad_ones_are_refused() {
        let mut a = sample();
        a.stacks.insert(8589934592, vec!["model.py:10:forward".into()]);
        a.launch_phases.insert(8589934592, "backward".into());
        let text = to_json(&a).unwrap();
        assert!(text.contains(r#", "launch_phases": {"8589934592": "backward"}"#), "{text}");
        assert_eq!(read_bytes(text.as_bytes()).unwrap().launch_phases, a.launch_phases);
        let with = |phases: &str| {
            format!(
                r#"{{"format": "cgfast-annotations", "version": 1, "annotations": {{}}, "launch_phases": {phases}}}"#
            )
        };
        assert!(read_bytes(with("[]").as_bytes())
            .unwrap_err()
            .contains("\"launch_phases\" is not an object"));
        assert!(read_bytes(with(r#"{"x": "backward"}"#).as_bytes())
            .unwrap_err()
            .contains("launch_phases: key"));
        assert!(read_bytes(with(r#"{"1": 2}"#).as_bytes()).unwrap_err().contains("not a string"));
    }

    #[test]
    fn traces_round_trip_and_bad_ones_are_refused() {
        let mut a = sample();
        a.traces = vec!["/runs/a/worker0.17.pt.trace.json.gz".into(), r#"/runs/b/t "1".json"#.into()];
        let text = to_json(&a).unwrap();
        let listed = r#", "traces": ["/runs/a/worker0.17.pt.trace.json.gz", "/runs/b/t \"1\".json"]}"#;
        assert!(text.ends_with(&format!("{listed}\n")), "{text}");
        assert_eq!(read_bytes(text.as_bytes()).unwrap().traces, a.traces);
        // without traces, the file is what it was before they existed
        let without = format!("{}}}\n", &text[..text.len() - listed.len() - 1]);
        assert_eq!(without, to_json(&sample()).unwrap());
        let with = |traces: &str| {
            format!(
                r#"{{"format": "cgfast-annotations", "version": 1, "annotations": {{}}, "traces": {traces}}}"#
            )
        };
        assert!(read_bytes(with("[]").as_bytes()).unwrap().traces.is_empty());
        for (bad, message) in [
            (r#""/runs/t.json""#, r#"a.ann: "traces" is "/runs/t.json", not a list of paths"#),
            (r#"{"0": "t.json"}"#, r#"a.ann: "traces" is {'0': 't.json'}, not a list of paths"#),
            (r#"["t.json", 3]"#, "a.ann: traces: an item is 3, not a path"),
            (r#"[""]"#, r#"a.ann: traces: an item is "", not a path"#),
            ("[null]", "a.ann: traces: an item is None, not a path"),
        ] {
            let error = read_bytes(with(bad).as_bytes()).unwrap_err();
            assert!(error.ends_with(message) && !error.contains('\n'), "{bad}: {error}");
        }
    }

    #[test]
    fn traces_alone_are_read_from_any_file_that_parses_and_refused_only_when_malformed() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let cgfast = |rest: &str| format!(r#"{{"format": "cgfast-annotations", "version": 1{rest}}}"#);
        let listed = file("listed.json", &cgfast(r#", "annotations": {"x": 1}, "traces": ["/t/a.json"]"#));
        assert!(read(&listed).is_err(), "its annotations are bad");
        assert_eq!(read_traces(&listed).unwrap(), [PathBuf::from("/t/a.json")]);
        for unlisted in [
            file("none.json", &cgfast(r#", "annotations": {}"#)),
            file("truncated.json", r#"{"format": "cgfast-annotations", "traces": ["/t/a.json"#),
            file("bare.json", r#"{"traces": ["/t/a.json"]}"#),
            file("empty.json", ""),
            dir.path().join("absent.json"),
        ] {
            assert!(read_traces(&unlisted).unwrap().is_empty(), "{}", unlisted.display());
        }
        let bad = file("bad.json", &cgfast(r#", "annotations": {}, "traces": [1]"#));
        let error = read_traces(&bad).unwrap_err().to_string();
        assert!(error.ends_with("bad.json: traces: an item is 1, not a path"), "{error}");
    }

    #[cfg(unix)]
    #[test]
    fn a_trace_path_json_cannot_hold_is_refused() {
        use std::os::unix::ffi::OsStrExt;
        let mut a = sample();
        a.traces = vec![PathBuf::from(std::ffi::OsStr::from_bytes(b"/runs/\xff.json"))];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.json");
        let error = write(&path, &a).unwrap_err().to_string();
        assert!(error.contains("a.json: traces:") && error.contains("not valid UTF-8"), "{error}");
        assert!(!path.exists());
    }

    #[test]
    fn bare_mappings_are_accepted_and_bad_keys_refused() {
        let a = from_document(json_value::parse(br#"{"12": [{"name": "x"}]}"#).unwrap()).unwrap();
        assert_eq!(a.nodes.len(), 1);
        let e = from_document(json_value::parse(br#"{"layer": []}"#).unwrap()).unwrap_err().to_string();
        assert!(e.contains("not a node id"), "{e}");
    }
}
