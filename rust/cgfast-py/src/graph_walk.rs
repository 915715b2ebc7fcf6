//! One native pass over a captured CUDA graph: what `cgfast.capture` records at capture
//! end (every kernel/memcpy/memset node with its id, kernel name, launch shape and
//! dependencies through any other node), without a Python call per node and query.
//!
//! The driver and CUPTI functions come as addresses from Python (`ctypes` has already
//! loaded them), so this module links nothing and works with whatever libcuda and
//! libcupti the process uses, or with test fakes made of `ctypes` callbacks.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

type Node = *mut c_void;
type GetNodes = unsafe extern "C" fn(*mut c_void, *mut Node, *mut usize) -> c_int;
type NodeType = unsafe extern "C" fn(Node, *mut c_int) -> c_int;
type NodeId = unsafe extern "C" fn(Node, *mut u64) -> c_int;
type DependenciesWithEdges = unsafe extern "C" fn(Node, *mut Node, *mut c_void, *mut usize) -> c_int;
type Dependencies = unsafe extern "C" fn(Node, *mut Node, *mut usize) -> c_int;
type EdgesWithData =
    unsafe extern "C" fn(*mut c_void, *mut Node, *mut Node, *mut c_void, *mut usize) -> c_int;
type Edges = unsafe extern "C" fn(*mut c_void, *mut Node, *mut Node, *mut usize) -> c_int;
type KernelParams = unsafe extern "C" fn(Node, *mut KernelNodeParams) -> c_int;
type FunctionName = unsafe extern "C" fn(*mut *const c_char, *mut c_void) -> c_int;

const KERNEL: c_int = 0;
const MEMCPY: c_int = 1;
const MEMSET: c_int = 2;
const CHILD_GRAPH: c_int = 4;
const EDGE_DATA_SIZE: usize = 8; // sizeof(CUgraphEdgeData)

/// `CUDA_KERNEL_NODE_PARAMS_v2`.
#[repr(C)]
struct KernelNodeParams {
    func: *mut c_void,
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared_mem_bytes: c_uint,
    kernel_params: *mut c_void,
    extra: *mut c_void,
    kern: *mut c_void,
    ctx: *mut c_void,
}

/// The functions a walk calls, from their addresses (0: not available).
struct Functions {
    get_nodes: GetNodes,
    node_type: NodeType,
    node_id: NodeId,
    dependencies: usize,
    dependencies_have_edges: bool,
    /// cuGraphGetEdges(_v2): every edge of a graph in one call (0: ask node by node)
    edges: usize,
    edges_have_data: bool,
    kernel_params: KernelParams,
    function_name: Option<FunctionName>,
    kernel_name: Option<FunctionName>,
}

fn required(address: usize, what: &str) -> PyResult<usize> {
    if address == 0 {
        return Err(PyValueError::new_err(format!("walk_graph: no address for {what}")));
    }
    Ok(address)
}

impl Functions {
    fn from_addresses(addresses: &HashMap<String, usize>) -> PyResult<Self> {
        let get = |name: &str| addresses.get(name).copied().unwrap_or(0);
        // SAFETY: the caller passes the addresses of functions with these C signatures
        // (cuGraphGetNodes, cuGraphNodeGetType, cuptiGetGraphNodeId, ...).
        unsafe {
            Ok(Functions {
                get_nodes: std::mem::transmute::<usize, GetNodes>(required(get("get_nodes"), "get_nodes")?),
                node_type: std::mem::transmute::<usize, NodeType>(required(get("node_type"), "node_type")?),
                node_id: std::mem::transmute::<usize, NodeId>(required(get("node_id"), "node_id")?),
                dependencies: required(get("dependencies"), "dependencies")?,
                dependencies_have_edges: get("dependencies_have_edges") != 0,
                edges: get("edges"),
                edges_have_data: get("edges_have_data") != 0,
                kernel_params: std::mem::transmute::<usize, KernelParams>(required(
                    get("kernel_params"),
                    "kernel_params",
                )?),
                function_name: match get("function_name") {
                    0 => None,
                    address => Some(std::mem::transmute::<usize, FunctionName>(address)),
                },
                kernel_name: match get("kernel_name") {
                    0 => None,
                    address => Some(std::mem::transmute::<usize, FunctionName>(address)),
                },
            })
        }
    }
}

fn check(call: &str, code: c_int) -> PyResult<()> {
    if code != 0 {
        return Err(PyRuntimeError::new_err(format!("{call} failed: error {code}")));
    }
    Ok(())
}

struct Walk {
    functions: Functions,
    /// function or kernel handle -> its name, read once per walk
    names: HashMap<(bool, usize), Option<String>>,
    /// node -> its dependencies, from one cuGraphGetEdges call where the driver has it
    dependencies: Option<HashMap<usize, Vec<Node>>>,
}

impl Walk {
    fn nodes(&self, graph: *mut c_void) -> PyResult<Vec<Node>> {
        let mut count = 0usize;
        // SAFETY: a null array asks only for the count.
        check("cuGraphGetNodes", unsafe {
            (self.functions.get_nodes)(graph, std::ptr::null_mut(), &mut count)
        })?;
        let mut nodes = vec![std::ptr::null_mut(); count];
        let mut filled = count;
        // SAFETY: `nodes` has room for `count` handles.
        check("cuGraphGetNodes", unsafe {
            (self.functions.get_nodes)(graph, nodes.as_mut_ptr(), &mut filled)
        })?;
        nodes.truncate(filled.min(count));
        Ok(nodes)
    }

    fn node_type(&self, node: Node) -> PyResult<c_int> {
        let mut kind: c_int = 0;
        // SAFETY: one out-parameter.
        check("cuGraphNodeGetType", unsafe { (self.functions.node_type)(node, &mut kind) })?;
        Ok(kind)
    }

    fn node_id(&self, node: Node) -> PyResult<u64> {
        let mut id = 0u64;
        // SAFETY: one out-parameter.
        check("cuptiGetGraphNodeId", unsafe { (self.functions.node_id)(node, &mut id) })?;
        Ok(id)
    }

    fn call_dependencies(&self, node: Node, out: *mut Node, edges: *mut c_void, count: &mut usize) -> c_int {
        // SAFETY: `dependencies` is cuGraphNodeGetDependencies(_v2), which signature the flag
        // says; `out` and `edges` are null (a count query) or have room for `count` entries.
        unsafe {
            if self.functions.dependencies_have_edges {
                let call = std::mem::transmute::<usize, DependenciesWithEdges>(self.functions.dependencies);
                call(node, out, edges, count)
            } else {
                let call = std::mem::transmute::<usize, Dependencies>(self.functions.dependencies);
                call(node, out, count)
            }
        }
    }

    fn call_edges(&self, graph: *mut c_void, from: *mut Node, to: *mut Node, count: &mut usize) -> c_int {
        // SAFETY: `edges` is cuGraphGetEdges(_v2), which signature the flag says; `from`
        // and `to` are null (a count query) or have room for `count` entries, and so has the
        // edge data asked for with them (else edges with non-default data fail as lossy).
        unsafe {
            if self.functions.edges_have_data {
                let call = std::mem::transmute::<usize, EdgesWithData>(self.functions.edges);
                if from.is_null() {
                    return call(graph, from, to, std::ptr::null_mut(), count);
                }
                let mut data = vec![0u8; EDGE_DATA_SIZE * *count];
                call(graph, from, to, data.as_mut_ptr() as *mut c_void, count)
            } else {
                std::mem::transmute::<usize, Edges>(self.functions.edges)(graph, from, to, count)
            }
        }
    }

    /// Every node's dependencies from one edge list (two calls), where the driver has it.
    fn read_edges(&mut self, graph: *mut c_void) -> PyResult<()> {
        if self.functions.edges == 0 {
            return Ok(());
        }
        let mut count = 0usize;
        let code = self.call_edges(graph, std::ptr::null_mut(), std::ptr::null_mut(), &mut count);
        check("cuGraphGetEdges", code)?;
        let mut from = vec![std::ptr::null_mut(); count];
        let mut to = vec![std::ptr::null_mut(); count];
        let mut filled = count;
        if count > 0 {
            let code = self.call_edges(graph, from.as_mut_ptr(), to.as_mut_ptr(), &mut filled);
            check("cuGraphGetEdges", code)?;
        }
        let mut dependencies: HashMap<usize, Vec<Node>> = HashMap::new();
        for (&source, &target) in from.iter().zip(&to).take(filled.min(count)) {
            dependencies.entry(target as usize).or_default().push(source);
        }
        self.dependencies = Some(dependencies);
        Ok(())
    }

    fn dependencies(&self, node: Node) -> PyResult<Vec<Node>> {
        if let Some(known) = &self.dependencies {
            return Ok(known.get(&(node as usize)).cloned().unwrap_or_default());
        }
        let mut count = 0usize;
        let code = self.call_dependencies(node, std::ptr::null_mut(), std::ptr::null_mut(), &mut count);
        check("cuGraphNodeGetDependencies", code)?;
        if count == 0 {
            return Ok(Vec::new());
        }
        let mut deps = vec![std::ptr::null_mut(); count];
        // Edge data is asked for too, else edges with non-default data fail as a lossy query.
        let mut edges = vec![0u8; EDGE_DATA_SIZE * count];
        let mut filled = count;
        let code =
            self.call_dependencies(node, deps.as_mut_ptr(), edges.as_mut_ptr() as *mut c_void, &mut filled);
        check("cuGraphNodeGetDependencies", code)?;
        deps.truncate(filled.min(count));
        Ok(deps)
    }

    fn name_of(&mut self, is_kernel: bool, handle: *mut c_void) -> Option<String> {
        let getter = if is_kernel { self.functions.kernel_name } else { self.functions.function_name }?;
        self.names
            .entry((is_kernel, handle as usize))
            .or_insert_with(|| {
                let mut name: *const c_char = std::ptr::null();
                // SAFETY: cuFuncGetName / cuKernelGetName with a handle the driver gave.
                if unsafe { getter(&mut name, handle) } != 0 || name.is_null() {
                    return None;
                }
                // SAFETY: the driver returns a NUL-terminated string it owns.
                let text = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
                (!text.is_empty()).then_some(text)
            })
            .clone()
    }

    fn kernel(&mut self, node: Node) -> PyResult<Launch> {
        // SAFETY: all-zero is a valid value of this plain C struct.
        let mut params: KernelNodeParams = unsafe { std::mem::zeroed() };
        // SAFETY: one out-parameter of the driver's v2 layout.
        check("cuGraphKernelNodeGetParams", unsafe { (self.functions.kernel_params)(node, &mut params) })?;
        let name = if !params.func.is_null() && self.functions.function_name.is_some() {
            self.name_of(false, params.func)
        } else if !params.kern.is_null() && self.functions.kernel_name.is_some() {
            self.name_of(true, params.kern)
        } else {
            None
        };
        Ok((name, params.grid, params.block))
    }
}

type Launch = (Option<String>, [c_uint; 3], [c_uint; 3]);

/// One annotatable node: (node id, node type, kernel name, dependencies as local ids of
/// annotatable nodes, grid, block); name, grid and block are `None` except for kernels.
type Entry = (u64, c_int, Option<String>, Vec<u32>, Option<[c_uint; 3]>, Option<[c_uint; 3]>);

/// Walk `graph` once. `functions` maps `get_nodes`, `node_type`, `node_id`
/// (cuptiGetGraphNodeId), `dependencies` (+ `dependencies_have_edges`: 1 for the `_v2`
/// signature), optionally `edges` (cuGraphGetEdges; + `edges_have_data`: 1 for `_v2`: then
/// the dependencies come from one edge list instead of a call per node), `kernel_params` (cuGraphKernelNodeGetParams_v2) and, optionally,
/// `function_name` / `kernel_name` (cuFuncGetName / cuKernelGetName) to addresses.
/// Returns `(node_count, entries, child_graphs)`: the entries of the kernel, memcpy and
/// memset nodes in local-id order, each one's dependencies looked up through every other
/// node, and how many child-graph nodes the graph has (their bodies are not walked here:
/// where there are any, the caller walks the graph itself).
#[pyfunction]
pub fn walk_graph(functions: HashMap<String, usize>, graph: usize) -> PyResult<(usize, Vec<Entry>, usize)> {
    let mut walk =
        Walk { functions: Functions::from_addresses(&functions)?, names: HashMap::new(), dependencies: None };
    let nodes = walk.nodes(graph as *mut c_void)?;
    let mut annotatable: HashMap<usize, (u32, c_int, u64)> = HashMap::new(); // node -> local id, type, id
    let mut child_graphs = 0;
    for &node in &nodes {
        let kind = walk.node_type(node)?;
        if kind == CHILD_GRAPH {
            child_graphs += 1;
            continue;
        }
        if matches!(kind, KERNEL | MEMCPY | MEMSET) {
            let id = walk.node_id(node)?;
            annotatable.insert(node as usize, ((id & 0xFFFF_FFFF) as u32, kind, id));
        }
    }
    if child_graphs > 0 {
        return Ok((nodes.len(), Vec::new(), child_graphs));
    }
    walk.read_edges(graph as *mut c_void)?;
    let mut ordered: Vec<(usize, u32)> = annotatable.iter().map(|(&node, v)| (node, v.0)).collect();
    ordered.sort_by_key(|&(_, local_id)| local_id);
    let mut through = Collapser { annotatable: &annotatable, ancestors: HashMap::new() };
    let mut entries = Vec::with_capacity(ordered.len());
    for (node, _) in ordered {
        let (_, kind, id) = annotatable[&node];
        let mut deps: Vec<u32> = Vec::new();
        for dep in walk.dependencies(node as Node)? {
            match annotatable.get(&(dep as usize)) {
                Some(found) => deps.push(found.0),
                None => deps.extend(through.ancestors(&walk, dep)?),
            }
        }
        deps.sort_unstable();
        deps.dedup();
        let entry = if kind == KERNEL {
            let (name, grid, block) = walk.kernel(node as Node)?;
            (id, kind, name, deps, Some(grid), Some(block))
        } else {
            (id, kind, None, deps, None, None)
        };
        entries.push(entry);
    }
    Ok((nodes.len(), entries, 0))
}

/// The annotatable ancestors of other nodes (events, joins, allocations, child graphs),
/// memoized, found iteratively.
struct Collapser<'a> {
    annotatable: &'a HashMap<usize, (u32, c_int, u64)>,
    ancestors: HashMap<usize, Vec<u32>>,
}

impl Collapser<'_> {
    fn ancestors(&mut self, walk: &Walk, start: Node) -> PyResult<Vec<u32>> {
        let start = start as usize;
        let mut deps_of: HashMap<usize, Vec<usize>> = HashMap::new();
        let mut stack = vec![(start, false)];
        while let Some((node, expanded)) = stack.pop() {
            if self.ancestors.contains_key(&node) {
                continue;
            }
            if !expanded {
                let deps: Vec<usize> =
                    walk.dependencies(node as Node)?.into_iter().map(|dep| dep as usize).collect();
                stack.push((node, true));
                for &dep in &deps {
                    if !self.annotatable.contains_key(&dep) && !self.ancestors.contains_key(&dep) {
                        stack.push((dep, false));
                    }
                }
                deps_of.insert(node, deps);
                continue;
            }
            let mut found: Vec<u32> = Vec::new();
            for dep in deps_of.get(&node).map(Vec::as_slice).unwrap_or(&[]) {
                match self.annotatable.get(dep) {
                    Some(entry) => found.push(entry.0),
                    None => found.extend(self.ancestors.get(dep).into_iter().flatten().copied()),
                }
            }
            found.sort_unstable();
            found.dedup();
            self.ancestors.insert(node, found);
        }
        Ok(self.ancestors.get(&start).cloned().unwrap_or_default())
    }
}

/// `cuGraphGetNodes(graph, NULL, &count)` through the function at `get_nodes`: the node
/// count a module boundary reads, without ctypes' per-call cost.
#[pyfunction]
pub fn graph_node_count(get_nodes: usize, graph: usize) -> PyResult<usize> {
    let get_nodes = required(get_nodes, "get_nodes")?;
    let mut count = 0usize;
    // SAFETY: the caller passes cuGraphGetNodes' address; a null array asks only for the count.
    let code = unsafe {
        std::mem::transmute::<usize, GetNodes>(get_nodes)(
            graph as *mut c_void,
            std::ptr::null_mut(),
            &mut count,
        )
    };
    check("cuGraphGetNodes", code)?;
    Ok(count)
}
