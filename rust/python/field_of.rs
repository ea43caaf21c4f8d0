//! One field of a serde struct as a Python object, by its serde name,
//! converting nothing else: the report's entries read an attribute this way
//! (a decision's `action` read for each of 10^4 decisions converts 10^4
//! strings, not 10^4 whole decisions).
//!
//! A [`serde::Serializer`] that accepts only a struct: it walks the struct's
//! fields by name and hands the one asked for to pythonize.

use pyo3::prelude::*;
use pythonize::PythonizeError;
use serde::ser::{self, Error as _, Impossible, Serialize, SerializeStruct};

/// The field of `value` serde names `name`: `Ok(None)` where the struct
/// skips it (`skip_serializing_if`) or has no such field.
///
/// # Errors
/// `value` does not serialize as a struct, or pythonize fails on the field.
pub(super) fn field_of<'py, T: Serialize>(
    py: Python<'py>,
    value: &T,
    name: &str,
) -> Result<Option<Bound<'py, PyAny>>, PythonizeError> {
    value.serialize(FieldOf { py, name })
}

struct FieldOf<'py, 'n> {
    py: Python<'py>,
    name: &'n str,
}

struct Picking<'py, 'n> {
    py: Python<'py>,
    name: &'n str,
    found: Option<Bound<'py, PyAny>>,
}

impl<'py> SerializeStruct for Picking<'py, '_> {
    type Ok = Option<Bound<'py, PyAny>>;
    type Error = PythonizeError;

    fn serialize_field<F: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        value: &F,
    ) -> Result<(), PythonizeError> {
        if key == self.name {
            self.found = Some(pythonize::pythonize(self.py, value)?);
        }
        Ok(())
    }

    fn end(self) -> Result<Self::Ok, PythonizeError> {
        Ok(self.found)
    }
}

fn not_a_struct<T>() -> Result<T, PythonizeError> {
    Err(PythonizeError::custom(
        "fields are read off structs only (a report entry)",
    ))
}

/// Serializer methods for every value but a struct: each is an error.
macro_rules! refuse {
    ($($method:ident($($arg:ty),*)),* $(,)?) => {
        $(fn $method(self, $(_: $arg),*) -> Result<Self::Ok, PythonizeError> {
            not_a_struct()
        })*
    };
}

impl<'py, 'n> ser::Serializer for FieldOf<'py, 'n> {
    type Ok = Option<Bound<'py, PyAny>>;
    type Error = PythonizeError;
    type SerializeSeq = Impossible<Self::Ok, PythonizeError>;
    type SerializeTuple = Impossible<Self::Ok, PythonizeError>;
    type SerializeTupleStruct = Impossible<Self::Ok, PythonizeError>;
    type SerializeTupleVariant = Impossible<Self::Ok, PythonizeError>;
    type SerializeMap = Impossible<Self::Ok, PythonizeError>;
    type SerializeStruct = Picking<'py, 'n>;
    type SerializeStructVariant = Impossible<Self::Ok, PythonizeError>;

    fn serialize_struct(
        self,
        _name: &'static str,
        _len: usize,
    ) -> Result<Picking<'py, 'n>, PythonizeError> {
        Ok(Picking {
            py: self.py,
            name: self.name,
            found: None,
        })
    }

    refuse! {
        serialize_bool(bool), serialize_i8(i8), serialize_i16(i16), serialize_i32(i32),
        serialize_i64(i64), serialize_u8(u8), serialize_u16(u16), serialize_u32(u32),
        serialize_u64(u64), serialize_f32(f32), serialize_f64(f64), serialize_char(char),
        serialize_str(&str), serialize_bytes(&[u8]), serialize_none(), serialize_unit(),
        serialize_unit_struct(&'static str),
        serialize_unit_variant(&'static str, u32, &'static str),
    }

    fn serialize_some<F: ?Sized + Serialize>(self, _: &F) -> Result<Self::Ok, PythonizeError> {
        not_a_struct()
    }

    fn serialize_newtype_struct<F: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: &F,
    ) -> Result<Self::Ok, PythonizeError> {
        not_a_struct()
    }

    fn serialize_newtype_variant<F: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &F,
    ) -> Result<Self::Ok, PythonizeError> {
        not_a_struct()
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, PythonizeError> {
        not_a_struct()
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, PythonizeError> {
        not_a_struct()
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, PythonizeError> {
        not_a_struct()
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, PythonizeError> {
        not_a_struct()
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, PythonizeError> {
        not_a_struct()
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, PythonizeError> {
        not_a_struct()
    }
}
