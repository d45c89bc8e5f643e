"""Research experiments that are not part of the product: nothing in the product imports them."""
