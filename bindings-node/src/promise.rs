//! Promises settled from the core's runtime: an async call hands its core future to
//! `leafid::runtime`, which runs it on the core's own threads; when it completes, a
//! Node-API threadsafe function (napi's `JsDeferred`) settles the Promise on the JS
//! thread. Nothing waits on libuv's 4-thread pool, which the application's `fs`, `dns`
//! and `crypto` work needs, nor on the event loop.

use std::future::Future;
use std::pin::Pin;

use napi::bindgen_prelude::*;
use napi::sys;

use crate::error::{Failure, Fallible};

type Work<T> = Pin<Box<dyn Future<Output = Fallible<T>> + Send>>;
type Settle<T> = Box<dyn FnOnce(Env) -> Result<T> + Send>;

/// What an async method returns: the core's future, or the argument error found before
/// any work (the Promise then rejects with it, as Node's promise APIs do).
pub struct Pending<T>(Fallible<Work<T>>);

/// A Promise of `work`'s result; `prepared` is the outcome of reading the arguments.
pub fn pending<T, F, E>(prepared: Fallible<F>) -> Pending<T>
where
    F: Future<Output = std::result::Result<T, E>> + Send + 'static,
    E: Into<Failure>,
{
    Pending(prepared.map(|work| Box::pin(async move { work.await.map_err(Into::into) }) as Work<T>))
}

impl<T: ToNapiValue + Send + 'static> ToNapiValue for Pending<T> {
    unsafe fn to_napi_value(env: sys::napi_env, val: Self) -> Result<sys::napi_value> {
        // napi calls this on the JS thread with the call's live env.
        let env = Env::from_raw(env);
        let work = match val.0 {
            Ok(work) => work,
            Err(failure) => return rejected(&env, failure),
        };
        let (deferred, promise) = env.create_deferred::<T, Settle<T>>()?;
        let task = leafid::runtime::spawn(work);
        // A second task waits for the first so a panic in the core still settles the
        // Promise (with a plain Error) instead of leaving it pending forever.
        leafid::runtime::spawn(async move {
            let out = match task.await {
                Ok(out) => out,
                Err(e) => Err(Failure::Internal(format!(
                    "leafid: a background task failed ({e}); please report it"
                ))),
            };
            deferred.resolve(Box::new(move |env: Env| out.map_err(|f| f.into_napi(&env))));
        });
        Ok(promise.raw())
    }
}

impl<T> TypeName for Pending<T> {
    fn type_name() -> &'static str {
        "Promise"
    }
    fn value_type() -> ValueType {
        ValueType::Object
    }
}

/// A Promise already rejected with `failure`.
fn rejected(env: &Env, failure: Failure) -> Result<sys::napi_value> {
    let (mut deferred, mut promise) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: Node-API calls on the live env of this call; out-pointers are locals.
    unsafe {
        check_status!(sys::napi_create_promise(
            env.raw(),
            &mut deferred,
            &mut promise
        ))?;
        let error = failure.into_value(env.raw());
        check_status!(sys::napi_reject_deferred(env.raw(), deferred, error))?;
    }
    Ok(promise)
}
