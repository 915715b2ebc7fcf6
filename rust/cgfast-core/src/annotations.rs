//! Annotations: node id -> items (dicts or strings), as the capture layer records
//! them, and the recorded topology of each executable graph.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;

use crate::trace::NodeId;
use crate::value::Value;

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
pub struct Resolved {
    /// `args[key] = value` in order (the values are the strings `str()` gives).
    pub writes: Vec<(String, String)>,
    /// The lane the annotation asks for (`int(item["stream"])` of the last item naming one).
    pub stream: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationError(pub String);

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

    pub fn to_value(&self) -> Value {
        match self {
            Item::Dict(entries) => Value::Dict(entries.iter().map(|(k, v)| (Value::Str(k.clone()), v.clone())).collect()),
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
pub fn resolve(node: NodeId, items: &[Item]) -> Result<Resolved, AnnotationError> {
    let mut resolved = Resolved::default();
    for item in items {
        match item {
            Item::Dict(entries) => {
                for (key, value) in entries {
                    resolved.writes.push((key.clone(), value.py_str()));
                    if key == "stream" {
                        let stream = value.py_int().and_then(|s| i64::try_from(s).ok()).ok_or_else(|| {
                            AnnotationError(format!("node {node}: \"stream\" is {}, not an integer", value.py_str()))
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    Kernel,
    Memcpy,
    Memset,
}

impl NodeKind {
    pub fn code(self) -> u8 {
        match self {
            NodeKind::Kernel => 0,
            NodeKind::Memcpy => 1,
            NodeKind::Memset => 2,
        }
    }

    pub fn from_code(code: u64) -> Option<NodeKind> {
        match code {
            0 => Some(NodeKind::Kernel),
            1 => Some(NodeKind::Memcpy),
            2 => Some(NodeKind::Memset),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            NodeKind::Kernel => "kernel",
            NodeKind::Memcpy => "memcpy",
            NodeKind::Memset => "memset",
        }
    }

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
    pub id: i64,
    pub kind: NodeKind,
    /// The kernel's function name as the driver reports it (mangled).
    pub name: Option<String>,
    pub deps: Vec<i64>,
    pub grid: Option<[u32; 3]>,
    pub block: Option<[u32; 3]>,
}

/// Annotations and graph topology, as loaded from a file or handed over from Python.
#[derive(Clone, Debug, Default)]
pub struct Annotations {
    pub nodes: HashMap<NodeId, Vec<Item>>,
    /// Executable graph id -> its annotatable nodes in local-id order.
    pub graphs: BTreeMap<u32, Vec<GraphNode>>,
}

impl Annotations {
    /// The annotations of the nodes in `used`, resolved; other nodes' are not looked at
    /// (like the reference, which converts only what events use).
    pub fn resolve_used(&self, used: impl IntoIterator<Item = NodeId>) -> Result<HashMap<NodeId, Resolved>, AnnotationError> {
        let mut out = HashMap::default();
        for node in used {
            if out.contains_key(&node) {
                continue;
            }
            if let Some(items) = self.nodes.get(&node) {
                out.insert(node, resolve(node, items)?);
            }
        }
        Ok(out)
    }

    /// Every key an annotation may write into `args`.
    pub fn write_keys(&self) -> impl Iterator<Item = &str> {
        self.nodes.values().flatten().flat_map(|item| {
            let keys: Box<dyn Iterator<Item = &str>> = match item {
                Item::Dict(entries) => Box::new(entries.iter().map(|(k, _)| k.as_str())),
                Item::Other(_) => Box::new(std::iter::once("annotation")),
            };
            keys
        })
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
        assert_eq!(writes, [("name", "inner"), ("stream", "61"), ("annotation", "label"), ("layer", "3"), ("w", "0.5")]);
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
