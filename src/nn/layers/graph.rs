//! Compositions: layers wired as a graph, where a value may feed several layers (a fork) and
//! branches meet in joins ([`Join`]: sum, product, concat). A residual, a transformer block,
//! a ResNet block are each one: their forward is written as code that wires the nodes
//! ([`GraphConfig`]), and their backward is derived: the plan records every node on a tape
//! and replays it in reverse ([`super::tape`]), summing the gradients that meet at a fork in
//! one place. Leaf layers keep their own forward and backward kernels.
//!
//! ```
//! use webgpu_amp::nn::layers::graph::GraphConfig;
//! use webgpu_amp::nn::layers::linear::LinearConfig;
//! use webgpu_amp::nn::layers::unary::UnaryConfig;
//! use webgpu_amp::ops::unary::SILU;
//!
//! // Llama's MLP: down(silu(gate(x)) * up(x)).
//! let mut g = GraphConfig::new("mlp");
//! let x = GraphConfig::INPUT;
//! let gate = g.layer("gate_proj", LinearConfig::new(32, false), x);
//! let gate = g.layer("act_fn", UnaryConfig::new(&SILU), gate);
//! let up = g.layer("up_proj", LinearConfig::new(32, false), x);
//! let h = g.mul(gate, up);
//! let y = g.layer("down_proj", LinearConfig::new(8, false), h);
//! let mlp = g.output(y);
//! ```
//!
//! Layers are named relative to the composition (`gate_proj` under `model.layers.0.mlp` is
//! `model.layers.0.mlp.gate_proj.weight`); joins have no parameters and no name. In the
//! precision map the composition takes one row (its op: the add of a residual), and its
//! layers theirs after it, in the order they are wired.

use super::join::Join;
use super::layer::{NamedLayer, resolve_one};
use super::plan::ForwardPlan;
use super::precision::PrecisionWalk;
use super::tape::{Flow, Tape};
use super::{Backward, BackwardPlan, BufferDef, Layer, LayerConfig, ParamDef, Resolved};
use crate::amp::policy::{CastRule, Op};
use crate::error::Result;
use crate::tensor::{DType, Tensor};

/// A value of a composition being wired: its input, or a node's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Value(usize);

/// What a node does.
#[derive(Debug)]
enum Step {
    Layer(String, Box<dyn LayerConfig>),
    Join(Join),
}

/// A composition as wired, before shapes are known: nodes in the order their forward runs,
/// each reading earlier values.
#[derive(Debug)]
pub struct GraphConfig {
    kind: &'static str,
    nodes: Vec<(Step, Vec<Value>)>,
    output: Value,
}

impl GraphConfig {
    /// The composition's input.
    pub const INPUT: Value = Value(0);

    /// An empty composition of kind `kind` (its JSON key, or a name for descriptions).
    pub fn new(kind: &'static str) -> Self {
        Self {
            kind,
            nodes: Vec::new(),
            output: Self::INPUT,
        }
    }

    fn push(&mut self, step: Step, inputs: Vec<Value>) -> Value {
        self.nodes.push((step, inputs));
        Value(self.nodes.len())
    }

    /// `name(x)`: the layer `config` named `name`, reading `x`.
    pub fn layer(&mut self, name: &str, config: impl LayerConfig + 'static, x: Value) -> Value {
        self.boxed(name, Box::new(config), x)
    }

    /// [`Self::layer`] of a boxed config.
    pub fn boxed(&mut self, name: &str, config: Box<dyn LayerConfig>, x: Value) -> Value {
        self.push(Step::Layer(name.to_string(), config), vec![x])
    }

    /// The layers in order, each reading the one before, the first reading `x`.
    pub fn chain(&mut self, x: Value, layers: Vec<(String, Box<dyn LayerConfig>)>) -> Value {
        layers
            .into_iter()
            .fold(x, |x, (name, config)| self.boxed(&name, config, x))
    }

    /// The join of `inputs`.
    pub fn join(&mut self, join: Join, inputs: &[Value]) -> Value {
        self.push(Step::Join(join), inputs.to_vec())
    }

    /// `a + b`.
    pub fn add(&mut self, a: Value, b: Value) -> Value {
        self.join(Join::Sum, &[a, b])
    }

    /// `a * b`.
    pub fn mul(&mut self, a: Value, b: Value) -> Value {
        self.join(Join::Product, &[a, b])
    }

    /// `torch.cat(inputs, dim=-1)`.
    pub fn concat(&mut self, inputs: &[Value]) -> Value {
        self.join(Join::Concat, inputs)
    }

    /// The composition, with `y` as its output.
    pub fn output(mut self, y: Value) -> Self {
        self.output = y;
        self
    }
}

impl LayerConfig for GraphConfig {
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn resolve(&self, input: &[usize]) -> std::result::Result<Resolved, String> {
        let mut shapes = vec![input.to_vec()];
        let mut layers = Vec::new();
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for (step, inputs) in &self.nodes {
            let shape_of = |v: &Value| &shapes[v.0];
            let (op, shape) = match step {
                Step::Layer(name, config) => {
                    let l = resolve_one(shape_of(&inputs[0]), name, config.as_ref(), None)?;
                    let shape = l.output_shape.clone();
                    layers.push(l);
                    (Node::Layer(layers.len() - 1), shape)
                }
                Step::Join(join) => {
                    let ins: Vec<&[usize]> = inputs.iter().map(|v| &shape_of(v)[..]).collect();
                    (Node::Join(*join), join.resolve(&ins)?)
                }
            };
            nodes.push((op, inputs.iter().map(|v| v.0).collect()));
            shapes.push(shape);
        }
        let rows = layers
            .iter()
            .scan(0, |row, l: &NamedLayer| {
                let at = *row;
                *row += row_count(&*l.layer);
                Some(at)
            })
            .collect();
        let graph = Graph {
            kind: self.kind,
            layers,
            nodes,
            output: self.output.0,
            rows,
        };
        Ok(Resolved::new(graph, shapes[self.output.0].clone()))
    }
}

/// Rows a layer takes in the precision map: one, and those of the layers it is made of.
pub fn row_count(layer: &dyn Layer) -> usize {
    1 + layer
        .sublayers()
        .iter()
        .map(|l| row_count(&*l.layer))
        .sum::<usize>()
}

#[derive(Clone, Copy, Debug)]
enum Node {
    /// Index into the composition's layers.
    Layer(usize),
    Join(Join),
}

/// A resolved composition.
#[derive(Debug)]
pub struct Graph {
    kind: &'static str,
    layers: Vec<NamedLayer>,
    /// Each node with the values it reads (0: the input; k + 1: node k's output).
    nodes: Vec<(Node, Vec<usize>)>,
    output: usize,
    /// Each layer's first row, counted from the first row after the composition's own.
    rows: Vec<usize>,
}

impl Graph {
    /// The name of value `v` in the repr: `x`, a layer's name, or `join#k`.
    fn value_name(&self, v: usize) -> String {
        match v.checked_sub(1).map(|k| self.nodes[k].0) {
            None => "x".into(),
            Some(Node::Layer(i)) => self.layers[i].name.clone(),
            Some(Node::Join(j)) => format!("{}#{}", j.name(), v - 1),
        }
    }

    /// The dtype the readers of node `k`'s output compute in, when they are all layers of
    /// this composition and agree (a LayerNorm then writes it at once: no cast kernel).
    fn consumer_dtype(&self, f: &ForwardPlan<'_>, k: usize) -> Option<DType> {
        let Node::Layer(i) = self.nodes[k].0 else {
            return None;
        };
        if self.output == k + 1 {
            return None; // read outside too
        }
        let mut dtypes = self
            .nodes
            .iter()
            .filter(|(_, inputs)| inputs.contains(&(k + 1)))
            .map(|(node, _)| match node {
                Node::Layer(j) => {
                    let ahead = self.rows[*j] - self.rows[i];
                    f.compute_dtype_at(ahead, self.layers[*j].layer.op())
                }
                // A join promotes: an f32 input keeps it f32.
                Node::Join(_) => DType::F32,
            });
        let first = dtypes.next()?;
        dtypes.all(|d| d == first).then_some(first)
    }
}

impl Layer for Graph {
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn repr(&self) -> String {
        let mut title: Vec<char> = self.kind.chars().collect();
        title[0] = title[0].to_ascii_uppercase();
        let title: String = title.into_iter().collect();
        let items: Vec<String> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(k, (node, inputs))| {
                let reads: Vec<String> = inputs.iter().map(|&v| self.value_name(v)).collect();
                match node {
                    // A layer reading the value before it, as in a Sequential, says nothing more.
                    Node::Layer(i) if inputs[0] == k => {
                        format!(
                            "({}): {}",
                            self.layers[*i].name,
                            self.layers[*i].layer.repr()
                        )
                    }
                    Node::Layer(i) => format!(
                        "({} <- {}): {}",
                        self.layers[*i].name,
                        reads[0],
                        self.layers[*i].layer.repr()
                    ),
                    Node::Join(j) => format!("{}({})", j.name(), reads.join(", ")),
                }
            })
            .collect();
        format!("{title}({})", items.join(", "))
    }

    /// The op of the composition's row: its last join's (a residual's add).
    fn op(&self) -> Op {
        let last = self.nodes.iter().rev().find_map(|(node, _)| match node {
            Node::Join(j) => Some(*j),
            Node::Layer(_) => None,
        });
        let name = match last {
            Some(Join::Sum) => "Add",
            Some(Join::Product) => "Mul",
            Some(Join::Concat) => "Cat",
            None => "Sequential",
        };
        Op::new(name, CastRule::Input)
    }

    fn parameters(&self) -> Vec<ParamDef> {
        self.layers
            .iter()
            .flat_map(|l| l.layer.parameters().into_iter().map(|p| p.under(&l.name)))
            .collect()
    }

    fn buffers(&self) -> Vec<BufferDef> {
        self.layers
            .iter()
            .flat_map(|l| l.layer.buffers().into_iter().map(|b| b.under(&l.name)))
            .collect()
    }

    fn sublayers(&self) -> &[NamedLayer] {
        &self.layers
    }

    fn walk_precision(&self, w: &mut PrecisionWalk<'_>, x: DType) -> DType {
        let mut dtypes = vec![x];
        for (node, inputs) in &self.nodes {
            let dtype = match node {
                Node::Layer(i) => {
                    let l = &self.layers[*i];
                    w.run_layer(&l.name, &*l.layer, dtypes[inputs[0]])
                }
                Node::Join(_) => {
                    let ins: Vec<DType> = inputs.iter().map(|&v| dtypes[v]).collect();
                    Join::output_dtype(&ins)
                }
            };
            dtypes.push(dtype);
        }
        dtypes[self.output]
    }

    /// Each node in order, on the values it reads; the backward replays them.
    fn forward(&self, f: &mut ForwardPlan<'_>, x: Tensor) -> Result<(Tensor, Box<dyn Backward>)> {
        let mut flow = Flow::new(x, f.input_requires_grad());
        // The flow's value of each of the composition's values.
        let mut values = vec![0];
        for (k, (node, inputs)) in self.nodes.iter().enumerate() {
            let value = match node {
                Node::Layer(i) => {
                    let l = &self.layers[*i];
                    let consumer = self.consumer_dtype(f, k);
                    let input = values[inputs[0]];
                    f.run_layer(&mut flow, &l.name, &*l.layer, input, consumer)?
                }
                Node::Join(join) => {
                    let ins: Vec<usize> = inputs.iter().map(|&v| values[v]).collect();
                    let tensors: Vec<Tensor> = ins.iter().map(|&i| flow.value(i).clone()).collect();
                    let (y, backward) = join.forward(f, &tensors)?;
                    f.record_join(&mut flow, &ins, (y, Box::new(backward)))
                }
            };
            values.push(value);
        }
        let (y, tape) = flow.finish(values[self.output]);
        Ok((y, Box::new(GraphBackward { tape })))
    }
}

/// A composition's backward: its tape, replayed.
struct GraphBackward {
    tape: Tape,
}

impl Backward for GraphBackward {
    fn backward(&self, b: &mut BackwardPlan<'_>, dy: Tensor) -> Result<Option<Tensor>> {
        b.run_tape(&self.tape, dy)
    }
}
