//! ThingsBoard's page query and page result.

use crate::EntityError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SortOrder {
    #[default]
    Asc,
    Desc,
}

impl SortOrder {
    /// Parses `ASC` / `DESC`, case-insensitively, as ThingsBoard does.
    pub fn parse(text: &str) -> Result<SortOrder, EntityError> {
        match text.to_ascii_uppercase().as_str() {
            "ASC" => Ok(SortOrder::Asc),
            "DESC" => Ok(SortOrder::Desc),
            _ => Err(EntityError::Invalid(format!(
                "Invalid sort order '{text}'. Expected ASC or DESC"
            ))),
        }
    }

    fn sql(self) -> &'static str {
        match self {
            SortOrder::Asc => "ASC",
            SortOrder::Desc => "DESC",
        }
    }
}

/// `pageSize`, `page` (0-based), `textSearch` (case-insensitive substring), `sortProperty`, `sortOrder`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageQuery {
    pub page_size: u32,
    pub page: u32,
    pub text_search: Option<String>,
    pub sort_property: Option<String>,
    pub sort_order: SortOrder,
}

impl PageQuery {
    /// A query for `page` of `page_size` with no search and the default order.
    pub fn new(page_size: u32, page: u32) -> PageQuery {
        PageQuery {
            page_size,
            page,
            text_search: None,
            sort_property: None,
            sort_order: SortOrder::Asc,
        }
    }

    pub fn with_text_search(mut self, text: &str) -> PageQuery {
        self.text_search = Some(text.to_string());
        self
    }

    pub fn with_sort(mut self, property: &str, order: SortOrder) -> PageQuery {
        self.sort_property = Some(property.to_string());
        self.sort_order = order;
        self
    }

    /// The search text, or `None` when absent or empty (an empty search matches everything).
    pub(crate) fn search(&self) -> Option<&str> {
        self.text_search.as_deref().filter(|t| !t.is_empty())
    }

    /// `ORDER BY … LIMIT … OFFSET …` for this query. `columns` maps each sortable property to its SQL
    /// expression; rows of equal sort keys keep insertion order (`tiebreak`, the table's rowid).
    pub(crate) fn order_limit(
        &self,
        columns: &[(&str, &str)],
        default: &str,
        tiebreak: &str,
    ) -> Result<String, EntityError> {
        if self.page_size == 0 {
            return Err(EntityError::invalid(
                "Incorrect page link page size '0'. Page size must be greater than zero.",
            ));
        }
        let expr = match self.sort_property.as_deref().filter(|p| !p.is_empty()) {
            None => default,
            Some(property) => columns
                .iter()
                .find(|(name, _)| *name == property)
                .map(|(_, expr)| *expr)
                .ok_or_else(|| {
                    EntityError::Invalid(format!("Invalid sort property: {property}"))
                })?,
        };
        let order = self.sort_order.sql();
        let offset = u64::from(self.page) * u64::from(self.page_size);
        Ok(format!(
            "ORDER BY {expr} {order}, {tiebreak} {order} LIMIT {} OFFSET {offset}",
            self.page_size
        ))
    }

    /// Builds the page result from the rows of this page and the total count.
    pub(crate) fn page_of<T>(&self, data: Vec<T>, total_elements: u64) -> PageData<T> {
        let size = u64::from(self.page_size.max(1));
        let total_pages = total_elements.div_ceil(size);
        PageData {
            data,
            total_pages,
            total_elements,
            has_next: (u64::from(self.page) + 1) * size < total_elements,
        }
    }
}

/// `{"data":[…],"totalPages":N,"totalElements":N,"hasNext":bool}` before rendering.
#[derive(Debug, Clone, PartialEq)]
pub struct PageData<T> {
    pub data: Vec<T>,
    pub total_pages: u64,
    pub total_elements: u64,
    pub has_next: bool,
}

impl<T> PageData<T> {
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> PageData<U> {
        PageData {
            data: self.data.into_iter().map(f).collect(),
            total_pages: self.total_pages,
            total_elements: self.total_elements,
            has_next: self.has_next,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sort_order_parses_case_insensitively() {
        assert_eq!(SortOrder::parse("desc").unwrap(), SortOrder::Desc);
        assert_eq!(SortOrder::parse("ASC").unwrap(), SortOrder::Asc);
        assert!(SortOrder::parse("up").is_err());
    }

    #[test]
    fn page_arithmetic() {
        let q = PageQuery::new(10, 2);
        let p = q.page_of(vec![1, 2, 3], 23);
        assert_eq!(
            (p.total_pages, p.total_elements, p.has_next),
            (3, 23, false)
        );
        let p = PageQuery::new(10, 1).page_of(vec![0; 10], 23);
        assert!(p.has_next);
        let p = PageQuery::new(10, 0).page_of(Vec::<u8>::new(), 0);
        assert_eq!((p.total_pages, p.has_next), (0, false));
    }

    #[test]
    fn order_limit_checks_property_and_size() {
        let cols = [("name", "d.name"), ("createdTime", "d.created_time")];
        let sql = PageQuery::new(5, 3)
            .with_sort("name", SortOrder::Desc)
            .order_limit(&cols, "d.created_time", "d.rowid")
            .unwrap();
        assert_eq!(sql, "ORDER BY d.name DESC, d.rowid DESC LIMIT 5 OFFSET 15");
        let err = PageQuery::new(5, 0)
            .with_sort("nope", SortOrder::Asc)
            .order_limit(&cols, "d.created_time", "d.rowid")
            .unwrap_err();
        assert!(matches!(err, EntityError::Invalid(_)), "{err}");
        assert!(PageQuery::new(0, 0)
            .order_limit(&cols, "d.created_time", "d.rowid")
            .is_err());
    }
}
