//! Annotations: node id -> items (dicts or strings), as the capture layer records
//! them, and the recorded topology of each executable graph; read from and written to
//! annotation files ([`file`], PyTorch's pickles by [`pickle`]), with their values
//! printed as Python's `str()` prints them ([`value`], [`unicode`]).

pub(crate) mod file;
pub(crate) mod pickle;
pub(crate) mod unicode;
pub(crate) mod value;

use std::collections::BTreeMap;
use std::path::PathBuf;

use rustc_hash::FxHashMap as HashMap;

use crate::annotations::value::Value;
use crate::index::NodeId;

/// One item of a node's annotation list.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// `{key: value}`; keys are the JSON keys Python would write for them.
    Dict(Vec<(String, Value)>),
    /// Anything else (a string, normally): written to `args["annotation"]`.
    Other(Value),
}

/// What an annotated event receives, computed once per node.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Resolved {
    /// `args[key] = value` in order (the values are the strings `str()` gives).
    pub(crate) writes: Vec<(String, String)>,
    /// The lane the annotation asks for (`int(item["stream"])` of the last item naming one).
    pub(crate) stream: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AnnotationError(pub String);

impl std::fmt::Display for AnnotationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AnnotationError {}

impl Item {
    /// An item from a decoded value: dicts keep their entries, anything else is a label.
    pub fn from_value(value: Value) -> Item {
        match value {
            Value::Dict(entries) => Item::Dict(entries.into_iter().map(|(k, v)| (json_key(&k), v)).collect()),
            other => Item::Other(other),
        }
    }

    /// The item as a value: a dict of its entries, or its label.
    pub fn to_value(&self) -> Value {
        match self {
            Item::Dict(entries) => {
                Value::Dict(entries.iter().map(|(k, v)| (Value::Str(k.clone()), v.clone())).collect())
            }
            Item::Other(v) => v.clone(),
        }
    }
}

/// The key `json.dump` writes for a dict key.
fn json_key(key: &Value) -> String {
    match key {
        Value::Str(s) => s.clone(),
        Value::Bool(true) => "true".into(),
        Value::Bool(false) => "false".into(),
        Value::None => "null".into(),
        other => other.py_str(),
    }
}

/// Resolve a node's items the way `annotate_trace` applies them.
pub(crate) fn resolve(node: NodeId, items: &[Item]) -> Result<Resolved, AnnotationError> {
    let mut resolved = Resolved::default();
    for item in items {
        match item {
            Item::Dict(entries) => {
                for (key, value) in entries {
                    resolved.writes.push((key.clone(), value.py_str()));
                    if key == "stream" {
                        let stream = value.py_int().and_then(|s| i64::try_from(s).ok()).ok_or_else(|| {
                            AnnotationError(format!(
                                "node {node}: \"stream\" is {}, not an integer",
                                value.py_str()
                            ))
                        })?;
                        resolved.stream = Some(stream);
                    }
                }
            }
            Item::Other(value) => resolved.writes.push(("annotation".into(), value.py_str())),
        }
    }
    Ok(resolved)
}

/// What an annotatable graph node does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// It launches a kernel.
    Kernel,
    /// It copies memory.
    Memcpy,
    /// It sets memory.
    Memset,
}

impl NodeKind {
    /// Its code in an annotation file.
    pub fn code(self) -> u8 {
        match self {
            NodeKind::Kernel => 0,
            NodeKind::Memcpy => 1,
            NodeKind::Memset => 2,
        }
    }

    /// The kind of a code in an annotation file.
    pub fn from_code(code: u64) -> Option<NodeKind> {
        match code {
            0 => Some(NodeKind::Kernel),
            1 => Some(NodeKind::Memcpy),
            2 => Some(NodeKind::Memset),
            _ => None,
        }
    }

    /// Its name: `kernel`, `memcpy` or `memset`.
    pub fn name(self) -> &'static str {
        match self {
            NodeKind::Kernel => "kernel",
            NodeKind::Memcpy => "memcpy",
            NodeKind::Memset => "memset",
        }
    }

    /// The kind of a name.
    pub fn from_name(name: &str) -> Option<NodeKind> {
        match name {
            "kernel" => Some(NodeKind::Kernel),
            "memcpy" => Some(NodeKind::Memcpy),
            "memset" => Some(NodeKind::Memset),
            _ => None,
        }
    }
}

/// An annotatable node of an executable graph, as recorded at capture.
#[derive(Clone, Debug, PartialEq)]
pub struct GraphNode {
    /// Its node id: the executable graph's id times 2^32 plus its local id.
    pub id: i64,
    /// What it does.
    pub kind: NodeKind,
    /// The kernel's function name as the driver reports it (mangled).
    pub name: Option<String>,
    /// The node ids of the nodes it depends on.
    pub deps: Vec<i64>,
    /// The kernel's grid dimensions.
    pub grid: Option<[u32; 3]>,
    /// The kernel's block dimensions.
    pub block: Option<[u32; 3]>,
}

/// Annotations and graph topology, as loaded from a file or handed over from Python.
#[derive(Clone, Debug, Default)]
pub struct Annotations {
    /// Node id -> its annotation items, in order.
    pub nodes: HashMap<NodeId, Vec<Item>>,
    /// Executable graph id -> its annotatable nodes in local-id order.
    pub graphs: BTreeMap<u32, Vec<GraphNode>>,
    /// Node id -> the Python frames that launched it (`file:line:function`, innermost
    /// first); written to annotated events as `args["launch"]` and `args["launch_stack"]`.
    pub stacks: HashMap<NodeId, Vec<String>>,
    /// Node id -> the pass its launch stack was recorded in, where that is not the
    /// forward pass (`"backward"`: the stack is that of the forward op whose gradient the
    /// node computes); written to annotated events as `args["launch_phase"]`.
    pub launch_phases: HashMap<NodeId, String>,
    /// The traces the process that recorded these exported, as `cgfast run` lists them
    /// (absolute paths, as the process wrote them).
    pub traces: Vec<PathBuf>,
    /// The annotation file they were read from, if any.
    pub source: Option<PathBuf>,
}

/// The args key a launch stack's innermost frame is written to.
pub(crate) const LAUNCH_KEY: &str = "launch";
/// The args key the whole launch stack is written to, one frame a line.
pub(crate) const LAUNCH_STACK_KEY: &str = "launch_stack";
/// The args key a launch stack's phase is written to (absent for the forward pass).
pub(crate) const LAUNCH_PHASE_KEY: &str = "launch_phase";

impl Annotations {
    /// The annotations of the nodes in `used`, resolved; other nodes' are not looked at
    /// (like the reference, which converts only what events use).
    pub(crate) fn resolve_used(
        &self,
        used: impl IntoIterator<Item = NodeId>,
    ) -> Result<HashMap<NodeId, Resolved>, AnnotationError> {
        let mut out = HashMap::default();
        for node in used {
            if out.contains_key(&node) {
                continue;
            }
            if let Some(items) = self.nodes.get(&node) {
                let mut resolved = resolve(node, items)?;
                if let Some(frames) = self.stacks.get(&node).filter(|frames| !frames.is_empty()) {
                    resolved.writes.push((LAUNCH_KEY.into(), frames[0].clone()));
                    resolved.writes.push((LAUNCH_STACK_KEY.into(), frames.join("\n")));
                    if let Some(phase) = self.launch_phases.get(&node) {
                        resolved.writes.push((LAUNCH_PHASE_KEY.into(), phase.clone()));
                    }
                }
                out.insert(node, resolved);
            }
        }
        Ok(out)
    }

    /// Every key an annotation may write into `args`.
    pub(crate) fn write_keys(&self) -> impl Iterator<Item = &str> {
        let launch: &[&str] = match (self.stacks.is_empty(), self.launch_phases.is_empty()) {
            (true, _) => &[],
            (false, true) => &[LAUNCH_KEY, LAUNCH_STACK_KEY],
            (false, false) => &[LAUNCH_KEY, LAUNCH_STACK_KEY, LAUNCH_PHASE_KEY],
        };
        self.nodes
            .values()
            .flatten()
            .flat_map(|item| {
                let keys: Box<dyn Iterator<Item = &str>> = match item {
                    Item::Dict(entries) => Box::new(entries.iter().map(|(k, _)| k.as_str())),
                    Item::Other(_) => Box::new(std::iter::once("annotation")),
                };
                keys
            })
            .chain(launch.iter().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> Value {
        Value::Str(x.into())
    }

    #[test]
    fn resolves_like_the_reference() {
        let items = vec![
            Item::Dict(vec![("name".into(), s("inner")), ("stream".into(), s("61"))]),
            Item::Other(s("label")),
            Item::Dict(vec![("layer".into(), Value::Int(3)), ("w".into(), Value::Float(0.5))]),
        ];
        let r = resolve(1, &items).unwrap();
        assert_eq!(r.stream, Some(61));
        let writes: Vec<(&str, &str)> = r.writes.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            writes,
            [("name", "inner"), ("stream", "61"), ("annotation", "label"), ("layer", "3"), ("w", "0.5")]
        );
    }

    #[test]
    fn launch_stacks_write_their_innermost_frame_and_the_whole_stack() {
        let mut a = Annotations::default();
        a.nodes.insert(5, vec![Item::Dict(vec![("module".into(), s("layer1"))])]);
        a.nodes.insert(6, vec![Item::Dict(vec![("module".into(), s("fc"))])]);
        a.stacks.insert(5, vec!["model.py:10:forward".into(), "train.py:3:step".into()]);
        a.stacks.insert(7, vec!["model.py:99:forward".into()]); // no annotation: nothing
        let r = a.resolve_used([5, 6, 7]).unwrap();
        let writes: Vec<(&str, &str)> = r[&5].writes.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            writes,
            [
                ("module", "layer1"),
                ("launch", "model.py:10:forward"),
                ("launch_stack", "model.py:10:forward\ntrain.py:3:step")
            ]
        );
        assert_eq!(r[&6].writes.len(), 1);
        assert!(!r.contains_key(&7));
        let keys: Vec<&str> = a.write_keys().collect();
        assert!(keys.contains(&"launch") && keys.contains(&"launch_stack"));
        assert!(!keys.contains(&"launch_phase"));
        a.launch_phases.insert(6, "backward".into()); // no stack: nothing
        a.stacks.insert(6, vec!["model.py:10:forward".into()]);
        a.launch_phases.insert(6, "backward".into());
        let r = a.resolve_used([5, 6]).unwrap();
        let last: Vec<(&str, &str)> =
            r[&6].writes[1..].iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(
            last,
            [
                ("launch", "model.py:10:forward"),
                ("launch_stack", "model.py:10:forward"),
                ("launch_phase", "backward")
            ]
        );
        assert!(!r[&5].writes.iter().any(|(k, _)| k == "launch_phase"));
        assert!(a.write_keys().any(|k| k == "launch_phase"));
        a.stacks.clear();
        assert!(!a.write_keys().any(|k| k == "launch"));
    }

    #[test]
    fn rejects_a_stream_that_is_not_an_integer() {
        let items = vec![Item::Dict(vec![("stream".into(), s("side"))])];
        assert!(resolve(7, &items).unwrap_err().0.contains("node 7"));
    }

    #[test]
    fn dict_keys_become_json_keys() {
        let item = Item::from_value(Value::Dict(vec![(Value::Int(5), s("x")), (Value::Bool(true), s("y"))]));
        assert_eq!(item, Item::Dict(vec![("5".into(), s("x")), ("true".into(), s("y"))]));
    }
}
