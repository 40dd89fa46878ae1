//! `leafid::Error` → a JS `Error` with the core's message and its stable `code`
//! (`LEAF_TAG_NOT_FOUND`, …). The one place errors are mapped.

use napi::bindgen_prelude::*;

/// Builds the JS error object for a core error and wraps it so napi throws (or
/// rejects with) exactly that object.
pub fn to_js(env: &Env, e: leafid::Error) -> Error {
    let build = || -> Result<Error> {
        let mut obj = env.create_error(Error::new(Status::GenericFailure, e.to_string()))?;
        obj.set_named_property("code", e.code())?;
        obj.set_named_property("name", "LeafError")?;
        Ok(Error::from(obj.into_unknown(env)?))
    };
    build().unwrap_or_else(|fallback| fallback)
}

/// `Result<T, leafid::Error>` → `napi::Result<T>`.
pub trait IntoJs<T> {
    /// Maps the error side with [`to_js`].
    fn js(self, env: &Env) -> Result<T>;
}

impl<T> IntoJs<T> for leafid::Result<T> {
    fn js(self, env: &Env) -> Result<T> {
        self.map_err(|e| to_js(env, e))
    }
}
