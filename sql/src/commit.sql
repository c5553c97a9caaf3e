-- The end of the transaction the preamble began, when it began one.
\if :_idem_own_transaction
COMMIT;
\endif
