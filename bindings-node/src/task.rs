//! Blocking core calls run on libuv's thread pool and settle a Promise: the event loop
//! never waits on the database or ZooKeeper.

use napi::bindgen_prelude::*;

use crate::error::rejection;

type Call<T> = Box<dyn FnOnce() -> leafid::Result<T> + Send>;

/// A blocking call whose result converts to a JS value on the main thread.
pub struct Blocking<T> {
    call: Option<Call<T>>,
}

/// Wraps `call` as a Promise-returning task.
pub fn blocking<T>(
    call: impl FnOnce() -> leafid::Result<T> + Send + 'static,
) -> AsyncTask<Blocking<T>>
where
    T: ToNapiValue + TypeName + Send + 'static,
{
    AsyncTask::new(Blocking {
        call: Some(Box::new(call)),
    })
}

impl<T> Task for Blocking<T>
where
    T: ToNapiValue + TypeName + Send + 'static,
{
    type Output = leafid::Result<T>;
    type JsValue = T;

    fn compute(&mut self) -> Result<Self::Output> {
        let call = self.call.take().expect("a task runs once");
        Ok(call())
    }

    fn resolve(&mut self, env: Env, output: Self::Output) -> Result<T> {
        output.map_err(|e| rejection(&env, e))
    }
}
