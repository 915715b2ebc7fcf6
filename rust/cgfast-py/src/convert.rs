//! Python objects <-> the core's values and annotations.

use std::collections::BTreeMap;

use cgfast_core::{Annotations, GraphNode, Item, NodeId, NodeKind, Value};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyMapping, PyString, PyTuple};

/// A Python object as an annotation value; other objects become their `str()`.
pub fn value_of(obj: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    if depth > 100 {
        return Err(PyValueError::new_err("annotation value is nested too deeply"));
    }
    Ok(if obj.is_none() {
        Value::None
    } else if obj.is_instance_of::<PyBool>() {
        Value::Bool(obj.extract()?)
    } else if obj.is_instance_of::<PyInt>() {
        match obj.extract::<i128>() {
            Ok(i) => Value::Int(i),
            Err(_) => Value::BigInt(obj.str()?.to_string()),
        }
    } else if obj.is_instance_of::<PyFloat>() {
        Value::Float(obj.extract()?)
    } else if let Ok(s) = obj.cast::<PyString>() {
        Value::Str(s.to_string_lossy().into_owned())
    } else if let Ok(b) = obj.cast::<PyBytes>() {
        Value::Bytes(b.as_bytes().to_vec())
    } else if let Ok(l) = obj.cast::<PyList>() {
        Value::List(l.iter().map(|x| value_of(&x, depth + 1)).collect::<PyResult<_>>()?)
    } else if let Ok(t) = obj.cast::<PyTuple>() {
        Value::Tuple(t.iter().map(|x| value_of(&x, depth + 1)).collect::<PyResult<_>>()?)
    } else if let Ok(d) = obj.cast::<PyDict>() {
        Value::Dict(
            d.iter()
                .map(|(k, v)| Ok((value_of(&k, depth + 1)?, value_of(&v, depth + 1)?)))
                .collect::<PyResult<_>>()?,
        )
    } else {
        Value::Str(obj.str()?.to_string())
    })
}

pub fn value_to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::None => py.None().into_bound(py),
        Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Value::Int(i) => i.into_pyobject(py)?.into_any(),
        Value::BigInt(digits) => py.get_type::<PyInt>().call1((digits.as_str(),))?,
        Value::Float(f) => f.into_pyobject(py)?.into_any(),
        Value::Str(s) => PyString::new(py, s).into_any(),
        Value::Bytes(b) => PyBytes::new(py, b).into_any(),
        Value::List(items) => {
            PyList::new(py, items.iter().map(|x| value_to_py(py, x)).collect::<PyResult<Vec<_>>>()?)?
                .into_any()
        }
        Value::Tuple(items) => {
            PyTuple::new(py, items.iter().map(|x| value_to_py(py, x)).collect::<PyResult<Vec<_>>>()?)?
                .into_any()
        }
        Value::Dict(entries) => {
            let d = PyDict::new(py);
            for (k, v) in entries {
                d.set_item(value_to_py(py, k)?, value_to_py(py, v)?)?;
            }
            d.into_any()
        }
    })
}

fn node_id(key: &Bound<'_, PyAny>) -> PyResult<NodeId> {
    if key.is_instance_of::<PyInt>() && !key.is_instance_of::<PyBool>() {
        return key.extract::<NodeId>();
    }
    Err(PyTypeError::new_err(format!("annotation key {} is not a node id (an int)", key.repr()?)))
}

/// A mapping of node id -> annotation list (and optional topology) as core annotations.
pub fn annotations_of(
    mapping: &Bound<'_, PyAny>,
    graphs: Option<&Bound<'_, PyAny>>,
) -> PyResult<Annotations> {
    let mapping = mapping
        .cast::<PyMapping>()
        .map_err(|_| PyTypeError::new_err("annotations must be a mapping of node id -> list"))?;
    let mut out = Annotations::default();
    for entry in mapping.items()?.iter() {
        let (key, items): (Bound<'_, PyAny>, Bound<'_, PyAny>) = entry.extract()?;
        let node = node_id(&key)?;
        let items = match value_of(&items, 0)? {
            Value::List(xs) | Value::Tuple(xs) => xs.into_iter().map(Item::from_value).collect(),
            other => {
                return Err(PyTypeError::new_err(format!(
                    "annotations of node {node} must be a list, not {}",
                    other.py_str()
                )))
            }
        };
        out.nodes.insert(node, items);
    }
    if let Some(graphs) = graphs.filter(|g| !g.is_none()) {
        out.graphs = graphs_of(graphs)?;
    }
    Ok(out)
}

fn dims_of(obj: Option<Bound<'_, PyAny>>) -> PyResult<Option<[u32; 3]>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => {
            let v: Vec<u32> = o.extract()?;
            <[u32; 3]>::try_from(v)
                .map(Some)
                .map_err(|_| PyValueError::new_err("grid and block have three dimensions"))
        }
    }
}

fn graphs_of(graphs: &Bound<'_, PyAny>) -> PyResult<BTreeMap<u32, Vec<GraphNode>>> {
    let graphs = graphs
        .cast::<PyMapping>()
        .map_err(|_| PyTypeError::new_err("graphs must be a mapping of exec graph id -> nodes"))?;
    let mut out = BTreeMap::new();
    for entry in graphs.items()?.iter() {
        let (exec_id, nodes): (u32, Bound<'_, PyAny>) = entry.extract()?;
        let mut decoded = Vec::new();
        for node in nodes.try_iter()? {
            let node = node?;
            let field = |name: &str| node.get_item(name).ok().filter(|v| !v.is_none());
            let id: i64 =
                field("id").ok_or_else(|| PyValueError::new_err("a graph node has no \"id\""))?.extract()?;
            let kind_name: String = field("type")
                .ok_or_else(|| PyValueError::new_err("a graph node has no \"type\""))?
                .extract()?;
            let kind = NodeKind::from_name(&kind_name)
                .ok_or_else(|| PyValueError::new_err(format!("unknown graph node type {kind_name:?}")))?;
            let name: Option<String> = field("name").map(|n| n.extract()).transpose()?;
            let deps: Vec<i64> = field("deps").map(|d| d.extract()).transpose()?.unwrap_or_default();
            decoded.push(GraphNode {
                id,
                kind,
                name,
                deps,
                grid: dims_of(field("grid"))?,
                block: dims_of(field("block"))?,
            });
        }
        out.insert(exec_id, decoded);
    }
    Ok(out)
}

pub fn graphs_to_py<'py>(
    py: Python<'py>,
    graphs: &BTreeMap<u32, Vec<GraphNode>>,
) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    for (exec_id, nodes) in graphs {
        let list = PyList::empty(py);
        for n in nodes {
            let d = PyDict::new(py);
            d.set_item("id", n.id)?;
            d.set_item("type", n.kind.name())?;
            d.set_item("name", n.name.as_deref())?;
            d.set_item("deps", n.deps.clone())?;
            d.set_item("grid", n.grid.map(|g| g.to_vec()))?;
            d.set_item("block", n.block.map(|b| b.to_vec()))?;
            list.append(d)?;
        }
        out.set_item(exec_id, list)?;
    }
    Ok(out)
}

pub fn json_to_py<'py>(py: Python<'py>, v: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        serde_json::Value::Null => py.None().into_bound(py),
        serde_json::Value::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => i.into_pyobject(py)?.into_any(),
            None => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        serde_json::Value::String(s) => PyString::new(py, s).into_any(),
        serde_json::Value::Array(items) => {
            PyList::new(py, items.iter().map(|x| json_to_py(py, x)).collect::<PyResult<Vec<_>>>()?)?
                .into_any()
        }
        serde_json::Value::Object(map) => {
            let d = PyDict::new(py);
            for (k, v) in map {
                d.set_item(k, json_to_py(py, v)?)?;
            }
            d.into_any()
        }
    })
}
