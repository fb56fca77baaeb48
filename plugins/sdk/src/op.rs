//! Ops of the plugin's own (plugin ABI 1.2): a definition in text, with a *body* over other ops
//! that the runtime runs on every device without a kernel for the op. See
//! [`Host::register_op`](crate::Host::register_op) and docs/plugin-guide.md ("Ops of your own").

/// An op definition, in the notation of TensorFlow's `REGISTER_OP` (the fields of
/// `dpp_op_def_t`). Build it with [`OpDef::new`] and the setters:
///
/// ```text
/// OpDef::new("mydev.Swish")
///     .inputs("x: T")
///     .outputs("y: T")
///     .type_vars("T: {f32, f64}")
///     .attrs("beta: float = 1.0")
///     .body("bx = Mul(x, @beta); s = Sigmoid(bx); y = Mul(x, s)")
/// ```
///
/// - `name`: `namespace.Name` (a namespace is required, so plugins cannot take the names of
///   future core ops);
/// - `inputs` / `outputs`: `"name: TYPE, ..."`, a TYPE being a type variable or a dtype
///   (`f32`, `f64`, `i32`, `i64`, `u8`, `bool`); at least one output;
/// - `type_vars`: `"T: {f32, f64}; U: {i32}"`;
/// - `attrs`: `"alpha: float = 1.0; axes: ints = [1]; keep: bool = false; n: int; to: dtype"`
///   (no default: the caller must set it);
/// - `body`: statements `name = Op(arg, ..., attr=value)` separated by `;` or new lines, that
///   assign every output. An argument is a name defined before, a number or `@attr` (a scalar
///   of the dtype of the statement's first tensor argument); an attribute value is a literal
///   or `@attr`. `Op` is a basis op or an op registered before.
///
/// The host checks all of it when it commits the plugin's registrations after init; a mistake
/// fails the load with a message naming the op, the field and the statement.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpDef<'a> {
    /// `namespace.Name`.
    pub name: &'a str,
    /// The inputs, `"x: T, y: T"` (empty: none).
    pub inputs: &'a str,
    /// The outputs, as `inputs`.
    pub outputs: &'a str,
    /// The type variables, `"T: {f32, f64}"` (empty: none).
    pub type_vars: &'a str,
    /// The attributes, `"alpha: float = 1.0"` (empty: none).
    pub attrs: &'a str,
    /// The body: the op in terms of other ops.
    pub body: &'a str,
}

impl<'a> OpDef<'a> {
    /// A definition named `name`; set the other fields with the builder methods.
    pub fn new(name: &'a str) -> OpDef<'a> {
        OpDef {
            name,
            ..OpDef::default()
        }
    }

    /// Sets the inputs.
    pub fn inputs(mut self, inputs: &'a str) -> Self {
        self.inputs = inputs;
        self
    }

    /// Sets the outputs.
    pub fn outputs(mut self, outputs: &'a str) -> Self {
        self.outputs = outputs;
        self
    }

    /// Sets the type variables.
    pub fn type_vars(mut self, type_vars: &'a str) -> Self {
        self.type_vars = type_vars;
        self
    }

    /// Sets the attributes.
    pub fn attrs(mut self, attrs: &'a str) -> Self {
        self.attrs = attrs;
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: &'a str) -> Self {
        self.body = body;
        self
    }
}
