//! NOR-flash simulator (work in progress).
