//! One native pass over a captured CUDA graph: what `cgfast.capture` records at capture
//! end (every kernel/memcpy/memset node with its id, kernel name, launch shape and
//! dependencies through any other node), without a Python call per node and query; and
//! the node count a module boundary reads.
//!
//! The functions it calls are never taken from Python: `_resolve_graph_functions` looks
//! them up itself (`dlsym`) in the driver and CUPTI libraries the process has already
//! loaded (`RTLD_NOLOAD`: the copies `ctypes` loaded, never a second one) and hands back
//! an opaque `_GraphFunctions`, which is all `_walk_graph` and `_graph_node_count` take.
//! So this module links nothing, works with whatever libcuda and libcupti the process
//! uses (or a stand-in library of the same C signatures), and no Python caller can make
//! it call an arbitrary address. Only the graph handle comes from Python.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyModule;

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

/// A library this process had loaded, held open (one more reference) while its
/// functions may be called.
struct Library {
    handle: *mut c_void,
    name: String,
}

// SAFETY: a dlopen handle is process-wide; dlsym and dlclose may be called on any thread.
unsafe impl Send for Library {}
// SAFETY: as above; the handle is never written after dlopen.
unsafe impl Sync for Library {}

#[cfg(target_os = "linux")]
mod dl {
    use std::ffi::{c_char, c_int, c_void};

    pub const RTLD_NOW: c_int = 2;
    pub const RTLD_NOLOAD: c_int = 4;

    extern "C" {
        pub fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
        pub fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
        pub fn dlclose(handle: *mut c_void) -> c_int;
        pub fn dlerror() -> *mut c_char;
    }
}

impl Library {
    /// The already loaded library `name` (what `ctypes.CDLL(name)` loaded).
    #[cfg(target_os = "linux")]
    fn loaded(name: &str) -> PyResult<Self> {
        let c_name =
            CString::new(name).map_err(|_| PyValueError::new_err(format!("{name:?}: a NUL in the name")))?;
        // SAFETY: RTLD_NOLOAD never loads (so runs no initialiser): it only finds a library
        // that is already loaded and takes a reference to it.
        let handle = unsafe { dl::dlopen(c_name.as_ptr(), dl::RTLD_NOW | dl::RTLD_NOLOAD) };
        if handle.is_null() {
            return Err(PyValueError::new_err(format!(
                "{name} is not loaded in this process (the graph functions are looked up only in \
                 libraries already loaded): {}",
                last_dl_error()
            )));
        }
        Ok(Library { handle, name: name.to_owned() })
    }

    #[cfg(not(target_os = "linux"))]
    fn loaded(name: &str) -> PyResult<Self> {
        Err(PyValueError::new_err(format!("{name}: the native graph walk needs Linux")))
    }

    /// The address of `symbol`, or `None` when the library does not export it.
    #[cfg(target_os = "linux")]
    fn symbol(&self, symbol: &str) -> Option<usize> {
        let c_symbol = CString::new(symbol).ok()?;
        // SAFETY: a valid handle and a NUL-terminated name.
        let address = unsafe { dl::dlsym(self.handle, c_symbol.as_ptr()) };
        (!address.is_null()).then_some(address as usize)
    }

    #[cfg(not(target_os = "linux"))]
    fn symbol(&self, _symbol: &str) -> Option<usize> {
        None
    }

    /// The first of `symbols` the library exports: its name and address.
    fn first_of(&self, symbols: &[&'static str]) -> Option<(&'static str, usize)> {
        symbols.iter().find_map(|&symbol| self.symbol(symbol).map(|address| (symbol, address)))
    }

    fn required(&self, symbols: &[&'static str]) -> PyResult<(&'static str, usize)> {
        self.first_of(symbols).ok_or_else(|| {
            PyValueError::new_err(format!("{} exports none of {}", self.name, symbols.join(", ")))
        })
    }
}

#[cfg(target_os = "linux")]
fn last_dl_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated message owned by libc.
    let message = unsafe { dl::dlerror() };
    if message.is_null() {
        return "no error message".to_owned();
    }
    // SAFETY: not NULL, NUL-terminated.
    unsafe { CStr::from_ptr(message) }.to_string_lossy().into_owned()
}

impl Drop for Library {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        // SAFETY: the handle came from dlopen and is closed once; the library stays loaded
        // while ctypes (or anything else) holds it.
        unsafe {
            dl::dlclose(self.handle);
        }
    }
}

/// The functions a walk calls, each resolved by this module in a loaded library.
struct Functions {
    get_nodes: GetNodes,
    node_type: NodeType,
    /// cuptiGetGraphNodeId (None: resolved without libcupti, node counts only)
    node_id: Option<NodeId>,
    dependencies: usize,
    dependencies_have_edges: bool,
    /// cuGraphGetEdges(_v2): every edge of a graph in one call (0: ask node by node)
    edges: usize,
    edges_have_data: bool,
    kernel_params: KernelParams,
    function_name: Option<FunctionName>,
    kernel_name: Option<FunctionName>,
}

impl Functions {
    fn resolve(libcuda: &Library, libcupti: Option<&Library>) -> PyResult<Self> {
        let (_, get_nodes) = libcuda.required(&["cuGraphGetNodes"])?;
        let (_, node_type) = libcuda.required(&["cuGraphNodeGetType"])?;
        let (dependencies_name, dependencies) =
            libcuda.required(&["cuGraphNodeGetDependencies_v2", "cuGraphNodeGetDependencies"])?;
        let edges = libcuda.first_of(&["cuGraphGetEdges_v2", "cuGraphGetEdges"]);
        let (_, kernel_params) = libcuda.required(&["cuGraphKernelNodeGetParams_v2"])?;
        let node_id = match libcupti {
            Some(library) => Some(library.required(&["cuptiGetGraphNodeId"])?.1),
            None => None,
        };
        let function_name = libcuda.symbol("cuFuncGetName");
        let kernel_name = libcuda.symbol("cuKernelGetName");
        // SAFETY: each address is the symbol of that name in the driver (or CUPTI), whose
        // C signature (as cuda.h and cupti.h declare it, by the versioned name found) is
        // the type it becomes here.
        unsafe {
            Ok(Functions {
                get_nodes: std::mem::transmute::<usize, GetNodes>(get_nodes),
                node_type: std::mem::transmute::<usize, NodeType>(node_type),
                node_id: node_id.map(|address| std::mem::transmute::<usize, NodeId>(address)),
                dependencies,
                dependencies_have_edges: dependencies_name.ends_with("_v2"),
                edges: edges.map_or(0, |(_, address)| address),
                edges_have_data: edges.is_some_and(|(name, _)| name.ends_with("_v2")),
                kernel_params: std::mem::transmute::<usize, KernelParams>(kernel_params),
                function_name: function_name
                    .map(|address| std::mem::transmute::<usize, FunctionName>(address)),
                kernel_name: kernel_name.map(|address| std::mem::transmute::<usize, FunctionName>(address)),
            })
        }
    }
}

/// Driver (and CUPTI) functions this module resolved itself in libraries the process
/// had loaded; what `_walk_graph` and `_graph_node_count` call. Made only by
/// `_resolve_graph_functions`.
#[pyclass(frozen, name = "_GraphFunctions", module = "cgfast._cgfast")]
pub struct GraphFunctions {
    functions: Functions,
    /// the libraries the functions live in, held open as long as this object
    _libraries: Vec<Library>,
    description: String,
}

#[pymethods]
impl GraphFunctions {
    fn __repr__(&self) -> String {
        format!("<cgfast graph functions of {}>", self.description)
    }
}

/// Look up the graph functions the walk and the node count call in `libcuda` (the CUDA
/// driver, or a stand-in exporting its functions) and, for node ids, `libcupti`: both
/// named as they were loaded (`ctypes.CDLL(name)`) and already loaded in this process,
/// never loaded here. Raises `ValueError` when a library is not loaded or lacks a
/// function the walk needs.
#[pyfunction]
#[pyo3(name = "_resolve_graph_functions", signature = (libcuda, libcupti = None))]
pub fn resolve_graph_functions(libcuda: &str, libcupti: Option<&str>) -> PyResult<GraphFunctions> {
    let cuda = Library::loaded(libcuda)?;
    let cupti = libcupti.map(Library::loaded).transpose()?;
    let functions = Functions::resolve(&cuda, cupti.as_ref())?;
    let description = match &cupti {
        Some(cupti) => format!("{} and {}", cuda.name, cupti.name),
        None => cuda.name.clone(),
    };
    let mut libraries = vec![cuda];
    libraries.extend(cupti);
    Ok(GraphFunctions { functions, _libraries: libraries, description })
}

fn check(call: &str, code: c_int) -> PyResult<()> {
    if code != 0 {
        return Err(PyRuntimeError::new_err(format!("{call} failed: error {code}")));
    }
    Ok(())
}

struct Walk<'a> {
    functions: &'a Functions,
    /// function or kernel handle -> its name, read once per walk
    names: HashMap<(bool, usize), Option<String>>,
    /// node -> its dependencies, from one cuGraphGetEdges call where the driver has it
    dependencies: Option<HashMap<usize, Vec<Node>>>,
}

impl Walk<'_> {
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

    fn node_id(&self, node_id: NodeId, node: Node) -> PyResult<u64> {
        let mut id = 0u64;
        // SAFETY: one out-parameter.
        check("cuptiGetGraphNodeId", unsafe { node_id(node, &mut id) })?;
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

/// Walk `graph` (a `cudaGraph_t`) once with `functions`, which must have been resolved
/// with libcupti (for node ids). Returns `(node_count, entries, child_graphs)`: the
/// entries of the kernel, memcpy and memset nodes in local-id order, as `(node id, node
/// type, kernel name, dependencies as local ids, grid, block)` (name, grid and block
/// `None` except for kernels), each one's dependencies looked up through every other
/// node, and how many child-graph nodes the graph has (their bodies are not walked here:
/// where there are any, the entries are left empty and the caller walks the graph
/// itself). Dependencies come from one edge list where the driver has cuGraphGetEdges.
#[pyfunction]
#[pyo3(name = "_walk_graph")]
pub fn walk_graph(
    functions: &Bound<'_, GraphFunctions>,
    graph: usize,
) -> PyResult<(usize, Vec<Entry>, usize)> {
    let resolved = functions.get();
    let Some(node_id) = resolved.functions.node_id else {
        return Err(PyValueError::new_err(format!(
            "_walk_graph: the functions of {} were resolved without libcupti: no node ids",
            resolved.description
        )));
    };
    let mut walk = Walk { functions: &resolved.functions, names: HashMap::new(), dependencies: None };
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
            let id = walk.node_id(node_id, node)?;
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

/// `cuGraphGetNodes(graph, NULL, &count)` with `functions` (from
/// `_resolve_graph_functions`): the node count a module boundary reads, without ctypes'
/// per-call cost.
#[pyfunction]
#[pyo3(name = "_graph_node_count")]
pub fn graph_node_count(functions: &Bound<'_, GraphFunctions>, graph: usize) -> PyResult<usize> {
    let mut count = 0usize;
    // SAFETY: cuGraphGetNodes as resolved; a null array asks only for the count.
    let code = unsafe {
        (functions.get().functions.get_nodes)(graph as *mut c_void, std::ptr::null_mut(), &mut count)
    };
    check("cuGraphGetNodes", code)?;
    Ok(count)
}

/// Put the graph functions into the module without listing them in `__all__`: they are
/// `cgfast.capture`'s, not the package's API.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    module.setattr("_GraphFunctions", py.get_type::<GraphFunctions>())?;
    module.setattr("_resolve_graph_functions", wrap_pyfunction!(resolve_graph_functions, module)?)?;
    module.setattr("_walk_graph", wrap_pyfunction!(walk_graph, module)?)?;
    module.setattr("_graph_node_count", wrap_pyfunction!(graph_node_count, module)?)?;
    Ok(())
}
